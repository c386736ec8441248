// Vocabulary parallelism (see vocab_parallel.h).
#include "nn/parallel/vocab_parallel.h"

#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/dist/collectives.h"
#include "core/dist/functional.h"
#include "nn/linear_cross_entropy.h"
#include "nn/parallel/linear_1d.h"

namespace booster::nn {

VocabPartition VocabPartition::of(int64_t vocab_size, int tp, int rank, int64_t divisible_by) {
  BOOSTER_CHECK(divisible_by >= 1, "make_vocab_size_divisible_by must be >= 1, got ", divisible_by);
  BOOSTER_CHECK(vocab_size > 0 && tp >= 1 && rank >= 0 && rank < tp, "VocabPartition: vocab_size ", vocab_size,
                ", rank ", rank, " of ", tp);
  const int64_t multiple = divisible_by * tp;
  VocabPartition p;
  p.vocab_size = vocab_size;
  p.padded_size = (vocab_size + multiple - 1) / multiple * multiple;
  const int64_t chunk = p.padded_size / tp;
  p.begin = rank * chunk;
  p.end = std::min(vocab_size, p.begin + chunk);
  if (p.begin >= vocab_size) {
    int64_t fits = divisible_by;  // the largest padding multiple that leaves every rank a real row
    while (fits > 0 && (tp - 1) * ((vocab_size + fits * tp - 1) / (fits * tp) * fits) >= vocab_size) --fits;
    BOOSTER_THROW(ValueError, "vocabulary parallelism: vocab_size ", vocab_size, " padded to ", p.padded_size,
                  " (a multiple of make_vocab_size_divisible_by ", divisible_by, " x tp_size ", tp,
                  ") leaves tensor-parallel rank ", rank, " only padding; ",
                  fits > 0 ? "lower make_vocab_size_divisible_by (" + std::to_string(fits) + " leaves every rank a real row)"
                           : "the vocabulary is too small to split over " + std::to_string(tp) + " ranks");
  }
  return p;
}

namespace {
// Shards a [vocab, E] parameter to this rank's rows of the partition.
VocabPartition shard_rows(Tensor w, const dist::ProcessGroup& tp, int64_t divisible_by, const char* who) {
  VocabPartition part = VocabPartition::of(w.size(0), tp.size(), tp.rank(), divisible_by);
  shard_parameter_region(w, Region::box(w.shape(), {part.begin, 0}, {part.size(), w.size(1)}), who);
  return part;
}
}  // namespace

std::shared_ptr<Embedding> VocabParallelEmbedding1D::from_native_module(const std::shared_ptr<Module>& native,
                                                                        const dist::ProcessGroup& tp, int64_t divisible_by,
                                                                        bool gather_output) {
  if (auto done = std::dynamic_pointer_cast<VocabParallelEmbedding1D>(native)) return done;
  Tensor w = native_as<Embedding>(native, "VocabParallelEmbedding1D", "an Embedding").weight.get();
  VocabPartition part = shard_rows(w, tp, divisible_by, "VocabParallelEmbedding1D weight");
  return std::make_shared<VocabParallelEmbedding1D>(w, tp, part, gather_output);
}

VocabParallelEmbedding1D::VocabParallelEmbedding1D(Tensor weight, const dist::ProcessGroup& tp, VocabPartition part,
                                                   bool gather_output)
    : Embedding(std::move(weight)), VocabParallelHead(tp, part, gather_output) {}

std::shared_ptr<Module> VocabParallelEmbedding1D::fresh() const {
  return std::make_shared<VocabParallelEmbedding1D>(Tensor::empty(weight->shape(), weight->dtype()), tp_, part_, gather_);
}

// ids [...] -> [..., E]: this rank's rows where it owns the id, zeros elsewhere, summed over tp.
Tensor VocabParallelEmbedding1D::forward(const Tensor& ids) {
  const Tensor c = as_indices(ids, "VocabParallelEmbedding1D: ids");
  const int64_t* id = c.data<int64_t>();
  const int64_t n = c.numel();
  std::vector<int64_t> local(static_cast<size_t>(n));
  std::vector<float> keep(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    BOOSTER_CHECK_T(ValueError, id[i] >= 0 && id[i] < part_.vocab_size, "embedding: id ", id[i], " at position ", i,
                    " of ids ", shape_str(ids.shape()), " is outside the vocabulary of ", part_.vocab_size, " tokens");
    const bool own = id[i] >= part_.begin && id[i] < part_.end;
    local[size_t(i)] = own ? id[i] - part_.begin : 0;
    keep[size_t(i)] = own ? 1.f : 0.f;
  }
  Tensor rows = embedding(weight, Tensor::from_ints(local, ids.shape()));
  Shape ms = ids.shape();
  ms.push_back(1);
  return dist::reduce_forward(mul(rows, Tensor::from_vector(keep, ms, rows.dtype())), tp_);
}

Tensor VocabParallelHead::logits(const Tensor& hidden, const Tensor& weight) const {
  Tensor y = linear(dist::reduce_backward(hidden, tp_), weight, Tensor(), "lm head");
  return gather_ ? gather_vocab(y, tp_, part_) : y;
}

Tensor VocabParallelHead::head_loss(const Tensor& hidden, const Tensor& weight, const Tensor& targets) const {
  return linear_cross_entropy(dist::reduce_backward(hidden, tp_), weight, targets, {part_.begin, part_.vocab_size, &tp_});
}

std::shared_ptr<Linear> VocabParallelLMHead1D::from_native_module(const std::shared_ptr<Module>& native,
                                                                  const dist::ProcessGroup& tp, int64_t divisible_by,
                                                                  bool gather_output) {
  if (auto done = std::dynamic_pointer_cast<VocabParallelLMHead1D>(native)) return done;
  auto [w, b] = linear_handles(native, "VocabParallelLMHead1D");
  BOOSTER_CHECK(!b.defined(), "VocabParallelLMHead1D: a head with a bias is not split here (language-model heads have none)");
  VocabPartition part = shard_rows(w, tp, divisible_by, "VocabParallelLMHead1D weight");
  return std::make_shared<VocabParallelLMHead1D>(w, Tensor(), tp, part, gather_output);
}

VocabParallelLMHead1D::VocabParallelLMHead1D(Tensor weight, Tensor bias, const dist::ProcessGroup& tp,
                                             VocabPartition part, bool gather_output)
    : Linear(std::move(weight), std::move(bias)), VocabParallelHead(tp, part, gather_output) {}

std::shared_ptr<Module> VocabParallelLMHead1D::fresh() const {
  if (!weight.defined()) {  // released (a pipeline stage that does not hold the head)
    auto m = std::make_shared<VocabParallelLMHead1D>(Tensor::empty({1, 1}), Tensor(), tp_, part_, gather_);
    m->replace_tensor("weight", Tensor());
    return m;
  }
  return std::make_shared<VocabParallelLMHead1D>(Tensor::empty(weight->shape(), weight->dtype()), Tensor(), tp_, part_,
                                                 gather_);
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const dist::ProcessGroup& tp,
                                    const VocabPartition& part, int64_t ignore_index) {
  ProfileScope prof_("vocab_parallel_cross_entropy");
  BOOSTER_CHECK_T(ShapeError, logits.dim() == 2 && logits.size(1) == part.size(), "vocab_parallel_cross_entropy: logits ",
                  "must be [N, ", part.size(), "] (this rank's vocabulary columns ", part.begin, "..", part.end, "), got ",
                  shape_str(logits.shape()));
  const int64_t n = logits.size(0), c = logits.size(1);
  const Tensor tc = as_indices(targets, "vocab_parallel_cross_entropy: targets");
  BOOSTER_CHECK_T(ShapeError, targets.shape() == Shape{n}, "vocab_parallel_cross_entropy: targets ",
                  shape_str(targets.shape()), " do not match logits ", shape_str(logits.shape()), " (need [N])");
  const int64_t* y = tc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    BOOSTER_CHECK(y[i] == ignore_index || (y[i] >= 0 && y[i] < part.vocab_size), "vocab_parallel_cross_entropy: target[",
                  i, "] = ", y[i], " is not a token id in [0, ", part.vocab_size, ")");
  Tensor grad = logits.detach().to(DType::f32).contiguous().clone();  // becomes (softmax - one-hot)
  const RowsLoss sum = cross_entropy_rows_in_place(grad.data<float>(), y, n, c, {part.begin, part.vocab_size, &tp}, ignore_index);
  const double total = sum.total;
  const int64_t counted = sum.counted;
  const double denom = double(counted);  // no target counted: NaN, as cross_entropy
  const DType dt = logits.dtype();
  return autograd::record("vocab_parallel_cross_entropy", {logits}, Tensor::scalar(total / denom),
                          [grad, denom, dt](const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{scale(grad, g[0].item() / denom).to(dt)};
                          });
}

Tensor gather_vocab(const Tensor& logits, const dist::ProcessGroup& tp, const VocabPartition& part) {
  const int64_t chunk = part.padded_size / tp.size();
  Shape ps = logits.shape();
  ps.back() = chunk;
  Tensor padded = Tensor::zeros(ps, logits.dtype());
  padded.narrow(-1, 0, part.size()).copy_(logits.detach());
  Tensor whole = dist::all_gather_along(padded, -1, tp).narrow(-1, 0, part.vocab_size).contiguous();
  const int64_t begin = part.begin, size = part.size();
  return autograd::record("GatherVocab", {logits}, whole, [begin, size](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].narrow(-1, begin, size).contiguous()};
  });
}

}  // namespace booster::nn
