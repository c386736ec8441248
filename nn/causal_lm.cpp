// Causal language models' loss and generation (see causal_lm.h).
#include "nn/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/autograd/grad_mode.h"
#include "core/common/check.h"
#include "core/kernels/ops.h"
#include "core/tensor/random.h"
#include "nn/linear_cross_entropy.h"
#include "nn/module.h"
#include "nn/parallel/vocab_parallel.h"

namespace booster::nn {

namespace {

Tensor& entry(std::vector<Tensor>& v, size_t i, size_t n) {
  if (v.size() < n) v.resize(n);
  BOOSTER_CHECK(i < v.size(), "KVCache: layer ", i, " of ", v.size());
  return v[i];
}

// One row's next token from its last logits: top_k, temperature, a draw from the softmax.
int64_t draw(std::vector<float> logits, const GenerateOptions& o, Generator& g) {
  const auto v = int64_t(logits.size());
  const auto top = std::max_element(logits.begin(), logits.end());
  if (o.temperature == 0) return int64_t(top - logits.begin());
  float cut = -INFINITY;
  if (o.top_k > 0 && o.top_k < v) {
    std::vector<float> sorted(logits);
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    cut = sorted[size_t(o.top_k - 1)];
  }
  std::vector<double> p(size_t(v), 0.0);
  double sum = 0;
  for (size_t i = 0; i < size_t(v); ++i)
    if (logits[i] >= cut) sum += p[i] = std::exp(double(logits[i] - *top) / o.temperature);
  double u = g.next_double() * sum;
  for (size_t i = 0; i < size_t(v); ++i)
    if (p[i] > 0 && (u -= p[i]) <= 0) return int64_t(i);
  return int64_t(top - logits.begin());  // rounding left u above zero: the likeliest
}

}  // namespace

Tensor lm_token_loss(const VocabParallelHead* head, const Tensor& logits, const Tensor& targets) {
  BOOSTER_CHECK_T(ShapeError, logits.dim() >= 2 && targets.numel() * logits.size(-1) == logits.numel(), "language-model loss: ",
                  "logits ", shape_str(logits.shape()), " do not match targets ", shape_str(targets.shape()));
  const int64_t v = logits.size(-1);
  if (head && !head->gathers_output())
    return vocab_parallel_cross_entropy(logits.reshape({-1, v}), targets.reshape({-1}), head->group(), head->partition());
  return cross_entropy(logits.reshape({-1, v}), targets.reshape({-1}));
}

void causal_lm_loss(CausalLMOutput& out, const VocabParallelHead* head, const Tensor& labels, const Tensor& input_ids,
                    const char* model) {
  BOOSTER_CHECK_T(ShapeError, labels.shape() == input_ids.shape(), model, ": labels ", shape_str(labels.shape()),
                  " must be shaped as input_ids ", shape_str(input_ids.shape()));
  BOOSTER_CHECK_T(DTypeError, labels.dtype() == DType::i64, model, ": labels must be i64, not ", dtype_name(labels.dtype()));
  const int64_t t = out.logits.size(1);
  const Tensor shifted = labels.narrow(1, 1, t - 1);
  out.loss = lm_token_loss(head, out.logits.narrow(1, 0, t - 1), shifted);
  const Tensor counted = shifted.contiguous();
  const int64_t* l = counted.data<int64_t>();
  out.loss_tokens = std::count_if(l, l + counted.numel(), [](int64_t v) { return v != -100; });
}

Tensor whole_logits(const VocabParallelHead* head, const Tensor& logits) {
  return head && !head->gathers_output() ? gather_vocab(logits, head->group(), head->partition()) : logits;
}

const VocabParallelHead* vocab_parallel_head(Module& root, Embedding& embeddings, bool tied) {
  if (tied) return dynamic_cast<const VocabParallelHead*>(&embeddings);
  return dynamic_cast<const VocabParallelHead*>(root.get("lm_head").get());
}

Tensor lm_head_logits(Module& root, Embedding& embeddings, bool tied, const Tensor& hidden) {
  if (tied) return embeddings.call_forward([&] { return embeddings.project(hidden); });  // [B, T, E] x [V, E]^T
  return (*std::static_pointer_cast<UnaryModule>(root.get("lm_head")))(hidden);
}

Tensor lm_head_loss(Module& root, Embedding& embeddings, bool tied, const Tensor& hidden, const Tensor& targets) {
  const Tensor h = hidden.reshape({-1, hidden.size(-1)}), y = targets.reshape({-1});
  if (tied) return embeddings.call_forward([&] { return embeddings.project_loss(h, y); });
  const auto head = root.get("lm_head");
  if (auto* vp = dynamic_cast<VocabParallelLMHead1D*>(head.get()))
    return vp->call_forward([&] { return vp->head_loss(h, vp->weight, y); });
  auto* lin = dynamic_cast<Linear*>(head.get());
  if (!lin || lin->type_name() != "Linear" || lin->bias.defined()) return Tensor();
  return lin->call_forward([&] { return linear_cross_entropy(h, lin->weight, y); });
}

TensorMap lm_stage_outputs(Module& root, CausalLM& lm, Embedding& embeddings, bool tied, const Tensor& hidden,
                           const TensorMap& inputs) {
  const auto labels = inputs.find("labels");
  if (lm.fused_linear_cross_entropy && root.is_training() && autograd::GradMode::enabled() && labels != inputs.end()) {
    BOOSTER_CHECK_T(ShapeError, labels->second.numel() * hidden.size(-1) == hidden.numel(), root.type_name(),
                    ": labels ", shape_str(labels->second.shape()), " do not match the hidden states ",
                    shape_str(hidden.shape()), " (one target a token)");
    Tensor loss = lm_head_loss(root, embeddings, tied, hidden, labels->second);
    if (loss.defined()) return {{"loss", loss}};
  }
  return {{"logits", lm_head_logits(root, embeddings, tied, hidden)}};
}

Tensor& KVCache::key(size_t i, size_t n) { return entry(keys, i, n); }
Tensor& KVCache::value(size_t i, size_t n) { return entry(values, i, n); }

std::pair<Tensor, Tensor> extend_cache(Tensor& keys, Tensor& values, const Tensor& k, const Tensor& v) {
  if (!keys.defined()) {
    keys = k.contiguous(), values = v.contiguous();
  } else {
    BOOSTER_CHECK_T(ShapeError, keys.size(0) == k.size(0) && keys.size(1) == k.size(1) && keys.size(3) == k.size(3),
                    "KVCache: cached keys ", shape_str(keys.shape()), " do not take new keys ", shape_str(k.shape()));
    keys = concat({keys, k}, 2), values = concat({values, v}, 2);
  }
  return {keys, values};
}

Tensor cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, double scale) {
  const int64_t t = q.size(2), total = keys.size(2);
  if (total == t) return causal_attention(q, keys, values, 0.0, scale);
  BOOSTER_CHECK_T(ShapeError, t == 1, "cached attention: ", t, " new queries after ", total - t,
                  " cached tokens; after a cache, tokens come one at a time");
  return scaled_dot_product_attention(q, keys, values, 0.0, scale);
}

Tensor generate(CausalLM& model, const Tensor& input_ids, const GenerateOptions& o) {
  BOOSTER_CHECK_T(ShapeError, input_ids.dim() == 2 && input_ids.size(1) > 0,
                  "generate: input_ids must be [batch, tokens] with at least one token, got ", shape_str(input_ids.shape()));
  BOOSTER_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  BOOSTER_CHECK(o.temperature >= 0, "generate: temperature must be >= 0, got ", o.temperature);
  BOOSTER_CHECK(o.top_k >= 0, "generate: top_k must be >= 0, got ", o.top_k);
  NoGradGuard ng;
  const int64_t b = input_ids.size(0), limit = model.max_positions();
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(b));
  const std::vector<int64_t> flat = input_ids.to_int_vector();
  for (int64_t r = 0; r < b; ++r)
    rows[size_t(r)].assign(flat.begin() + r * input_ids.size(1), flat.begin() + (r + 1) * input_ids.size(1));
  Generator g(o.seed);
  KVCache cache;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const auto len = int64_t(rows[0].size());
    // The whole (cropped) context when there is no usable cache, else the last token.
    const bool whole = n == 0 || !o.use_cache || cache.length() + 1 > limit;
    const int64_t t = whole ? std::min(len, limit) : 1;
    std::vector<int64_t> ids;
    for (auto& row : rows) ids.insert(ids.end(), row.end() - t, row.end());
    if (whole) cache = KVCache{};
    const Tensor logits = model.forward_cached(Tensor::from_ints(ids, {b, t}), cache);
    const Tensor last = logits.select(1, t - 1).to(DType::f32).contiguous();  // [B, V]
    const std::vector<float> all = last.to_vector();
    const int64_t v = last.size(1);
    for (int64_t r = 0; r < b; ++r)
      rows[size_t(r)].push_back(draw(std::vector<float>(all.begin() + r * v, all.begin() + (r + 1) * v), o, g));
  }
  std::vector<int64_t> out;
  for (auto& row : rows) out.insert(out.end(), row.begin(), row.end());
  return Tensor::from_ints(out, {b, int64_t(rows[0].size())});
}

Tensor generate_in_eval(Module& module, CausalLM& model, const Tensor& input_ids, const GenerateOptions& o) {
  struct Restore {
    Module& m;
    bool on;
    ~Restore() { m.train(on); }
  } restore{module, module.is_training()};
  module.eval();
  return generate(model, input_ids, o);
}

}  // namespace booster::nn
