// Batch shares over threads (batch_split.h).
#include "nn/batch_split.h"

#include <omp.h>

#include <exception>
#include <optional>

#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/common/profiler.h"
#include "core/common/check.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/tensor/random.h"

namespace booster::nn {
namespace {

// Runs f(s) for every share at once, one OpenMP thread each, with the caller's thread-local
// modes (grad recording, reference kernels); the first exception any share threw is
// rethrown here once all have finished.
void on_share_threads(int shares, const std::function<void(int)>& f) {
  const bool grad = autograd::GradMode::enabled(), reference = kernels::use_reference();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(shares));
#pragma omp parallel num_threads(shares)
  {
    const int s = omp_get_thread_num();
    if (omp_get_num_threads() != shares) {
      errors[size_t(s)] = std::make_exception_ptr(
          BackendError("split_batch: " + std::to_string(shares) + " shares but OpenMP gave " +
                       std::to_string(omp_get_num_threads()) + " threads"));
    } else {
      const bool prev_grad = autograd::GradMode::enabled();
      autograd::GradMode::set_enabled(grad);
      ProfileShareGuard weight(1.0 / shares);
      try {
        std::optional<kernels::ReferenceGuard> ref;
        if (reference) ref.emplace();
        omp_set_num_threads(1);  // this share's task only: oneDNN then makes and runs its primitives for one thread
        f(s);
      } catch (...) {
        errors[size_t(s)] = std::current_exception();
      }
      autograd::GradMode::set_enabled(prev_grad);
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// t as f32 times w (a share's weight in a mean over the batch).
Tensor weighted(const Tensor& t, double w) {
  Tensor r = t.to(DType::f32).contiguous().clone();
  kernels::scale_(r, w);
  return r;
}

// The backward of split_batch's outputs: each share's backward at once on its own thread
// (seeded with its rows of a joined output's gradient, its weight of a mean's), then the
// parameters' gradients summed over the shares and the inputs' joined.
struct SplitBackward {
  std::vector<ShareOutput> outs;
  std::vector<std::vector<Tensor>> share_args;
  std::vector<int64_t> begin;  // share s: rows [begin[s], begin[s + 1])
  std::vector<double> mean_weight;  // share s's weight in a mean merge (they sum to 1)
  std::vector<Tensor> trained;
  std::vector<bool> arg_grad;  // which args require grad

  std::vector<Tensor> operator()(const std::vector<Tensor>& g) const {
    const int shares = int(outs.size());
    const bool retain = autograd::retaining_graph();
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(shares));
    on_share_threads(shares, [&](int s) { grads[size_t(s)] = share_backward(s, g, retain); });
    std::vector<Tensor> result = summed_over_shares(grads);
    for (size_t a = 0, k = trained.size(); a < arg_grad.size(); ++a) {
      if (!arg_grad[a]) {
        result.push_back(Tensor());
        continue;
      }
      std::vector<Tensor> parts;
      for (int s = 0; s < shares; ++s) {
        const Tensor& leaf = share_args[size_t(s)][a];
        const Tensor& gs = grads[size_t(s)][k];
        parts.push_back(gs.defined() ? gs : Tensor::zeros(leaf.shape(), leaf.dtype()));
      }
      result.push_back(concat(parts, 0));
      ++k;
    }
    return result;
  }

  // The parameters' gradients summed over the shares, on the share threads at once: thread t
  // sums a run of parameters holding about 1/shares of their elements (the first share's
  // gradient takes the others').
  std::vector<Tensor> summed_over_shares(std::vector<std::vector<Tensor>>& grads) const {
    ProfileScope prof_("split_batch gradient sum");
    const int shares = int(grads.size());
    std::vector<int64_t> upto(trained.size() + 1, 0);  // elements before parameter p
    for (size_t p = 0; p < trained.size(); ++p) upto[p + 1] = upto[p] + trained[p].numel();
    std::vector<Tensor> sums(trained.size());
    on_share_threads(shares, [&](int t) {
      ProfileShareGuard unweighted(0.0);  // the adds are timed as a whole above
      for (size_t p = 0; p < trained.size(); ++p) {
        if (upto[p] * shares / std::max<int64_t>(upto.back(), 1) != t) continue;  // another thread's
        Tensor& sum = sums[p];
        for (auto& gs : grads) {
          Tensor g = std::move(gs[p]);
          if (!g.defined()) continue;
          if (!sum.defined()) sum = g.is_contiguous() && g.is_sole_owner() ? g : g.contiguous().clone();
          else kernels::add_(sum, g);
        }
      }
    });
    return sums;
  }

  // Share s's gradients of the parameters, then of its rows of the args that require grad.
  std::vector<Tensor> share_backward(int s, const std::vector<Tensor>& g, bool retain) const {
    const ShareOutput& o = outs[size_t(s)];
    const int64_t b = begin[size_t(s)], n = begin[size_t(s) + 1] - b;
    std::vector<Tensor> roots, seeds;
    for (size_t i = 0, k = 0; i < o.tensors.size(); ++i) {
      if (!o.tensors[i].defined()) continue;
      const Tensor& gi = g[k++];  // g has the defined outputs' gradients
      if (!gi.defined() || !o.tensors[i].requires_grad()) continue;
      if (o.merge[i] == BatchMerge::mean && mean_weight[size_t(s)] == 0) continue;  // left out of the mean
      roots.push_back(o.tensors[i]);
      seeds.push_back(o.merge[i] == BatchMerge::concat
                          ? gi.narrow(0, b, n).contiguous()
                          : weighted(gi, mean_weight[size_t(s)]).to(o.tensors[i].dtype()));
    }
    std::vector<Tensor> wrt = trained;
    for (size_t a = 0; a < arg_grad.size(); ++a)
      if (arg_grad[a]) wrt.push_back(share_args[size_t(s)][a]);
    if (roots.empty()) return std::vector<Tensor>(wrt.size());
    return autograd::grad(roots, seeds, wrt, retain, /*only_inputs=*/true);
  }
};

// Each share's weight in the mean merges, summing to 1: its given weight over all the
// shares' (a language model's counted labels), else, or where they sum to 0, its rows.
std::vector<double> mean_weights(const std::vector<ShareOutput>& outs, const std::vector<int64_t>& begin) {
  const size_t shares = outs.size();
  double total = 0;
  bool given = true;
  for (const ShareOutput& o : outs) {
    given = given && o.weight >= 0;
    total += o.weight;
  }
  std::vector<double> w(shares);
  for (size_t s = 0; s < shares; ++s)
    w[s] = given && total > 0 ? outs[s].weight / total : double(begin[s + 1] - begin[s]) / double(begin.back());
  return w;
}

// The batch's rows: every defined arg's dim 0, the same for all, at least one a share.
int64_t batch_rows(const std::vector<Tensor>& args, int shares) {
  BOOSTER_CHECK(shares >= 1, "split_batch: ", shares, " shares");
  int64_t rows = -1;
  for (const Tensor& a : args) {
    if (!a.defined()) continue;
    BOOSTER_CHECK_T(ShapeError, a.dim() >= 1, "split_batch: a 0-dim input has no batch rows to split");
    BOOSTER_CHECK_T(ShapeError, rows < 0 || a.size(0) == rows, "split_batch: inputs of ", rows, " and ", a.size(0),
                    " rows (every input must have the batch along dim 0)");
    rows = a.size(0);
  }
  BOOSTER_CHECK_T(ShapeError, rows >= shares, "split_batch: ", rows, " rows cannot make ", shares, " shares");
  return rows;
}

// The shares' rows and inputs: each share's rows of every arg, as a leaf of its own (an arg's
// gradient is joined from the shares' in the backward, so no share's graph reaches
// another's), and the parameters that train.
SplitBackward cut_into_shares(int shares, int64_t rows, const std::vector<Tensor>& args,
                              const std::vector<Tensor>& params) {
  SplitBackward bw;
  bw.begin.resize(static_cast<size_t>(shares) + 1);
  for (int s = 0; s <= shares; ++s) bw.begin[size_t(s)] = rows * s / shares;
  bw.share_args.resize(static_cast<size_t>(shares));
  for (int s = 0; s < shares; ++s)
    for (const Tensor& a : args) {
      Tensor part;
      if (a.defined()) {
        part = a.detach().narrow(0, bw.begin[size_t(s)], bw.begin[size_t(s) + 1] - bw.begin[size_t(s)]);
        if (a.requires_grad()) part.requires_grad_(true);
      }
      bw.share_args[size_t(s)].push_back(part);
    }
  for (const Tensor& a : args) bw.arg_grad.push_back(a.defined() && a.requires_grad());
  for (const Tensor& p : params)
    if (p.defined() && p.requires_grad()) bw.trained.push_back(p);
  return bw;
}

// Every share returned the outputs share 0 did, under the same merge rules.
void check_share_outputs(const std::vector<ShareOutput>& outs) {
  const ShareOutput& first = outs[0];
  BOOSTER_CHECK(first.merge.size() == first.tensors.size(), "split_batch: ", first.tensors.size(), " outputs but ",
                first.merge.size(), " merge rules");
  for (size_t s = 1; s < outs.size(); ++s) {
    const ShareOutput& o = outs[s];
    BOOSTER_CHECK(o.tensors.size() == first.tensors.size() && o.merge == first.merge, "split_batch: share ", s,
                  " returned other outputs than share 0");
    for (size_t i = 0; i < o.tensors.size(); ++i)
      BOOSTER_CHECK(o.tensors[i].defined() == first.tensors[i].defined(), "split_batch: output ", i,
                    " is defined in one share and not in another");
  }
}

// Output i of the shares combined (rows joined, or a mean by the shares' weights), without
// history of its own.
Tensor merged_output(const SplitBackward& bw, size_t i) {
  const ShareOutput& first = bw.outs[0];
  const int shares = int(bw.outs.size());
  std::vector<Tensor> parts;
  for (int s = 0; s < shares; ++s) {
    const Tensor part = bw.outs[size_t(s)].tensors[i].detach();
    const int64_t rows = bw.begin[size_t(s) + 1] - bw.begin[size_t(s)];
    if (first.merge[i] == BatchMerge::concat)
      BOOSTER_CHECK_T(ShapeError, part.dim() >= 1 && part.size(0) == rows, "split_batch: output ", i, " of share ", s,
                      " is ", shape_str(part.shape()), ", not the share's ", rows, " rows");
    else
      BOOSTER_CHECK_T(ShapeError, part.shape() == first.tensors[i].shape(), "split_batch: output ", i,
                      " has other shapes in different shares");
    parts.push_back(part);
  }
  if (first.merge[i] == BatchMerge::concat) return concat(parts, 0);
  Tensor sum = Tensor::zeros(parts[0].shape(), DType::f32);
  for (int s = 0; s < shares; ++s)  // a share of weight 0 (no label counted: a NaN mean) is left out
    if (bw.mean_weight[size_t(s)] > 0) kernels::add_(sum, weighted(parts[size_t(s)], bw.mean_weight[size_t(s)]));
  return sum.to(parts[0].dtype());
}

}  // namespace

int batch_shares(int64_t rows, int threads) { return int(std::max<int64_t>(1, std::min<int64_t>(threads, rows))); }

std::vector<Tensor> split_batch(int shares, const std::vector<Tensor>& args, const std::vector<Tensor>& params,
                                const std::function<ShareOutput(int share, const std::vector<Tensor>& args)>& forward) {
  SplitBackward bw = cut_into_shares(shares, batch_rows(args, shares), args, params);
  // Each share draws (dropout) from a generator of its own, seeded from one draw of the
  // caller's: the same masks on every run of the same seed and share count, no two threads
  // advancing one generator.
  bw.outs.resize(static_cast<size_t>(shares));
  const uint64_t seed = default_generator().next_u64();
  on_share_threads(shares, [&](int s) {
    Generator g(seed, uint64_t(s));
    DefaultGeneratorGuard own(g);
    bw.outs[size_t(s)] = forward(s, bw.share_args[size_t(s)]);
  });
  check_share_outputs(bw.outs);
  bw.mean_weight = mean_weights(bw.outs, bw.begin);
  // The combined outputs; one node gives the defined ones a backward.
  std::vector<Tensor> merged, recorded;
  for (size_t i = 0; i < bw.outs[0].tensors.size(); ++i) {
    merged.push_back(bw.outs[0].tensors[i].defined() ? merged_output(bw, i) : Tensor());
    if (merged.back().defined()) recorded.push_back(merged.back());
  }
  std::vector<Tensor> inputs = bw.trained;
  inputs.insert(inputs.end(), args.begin(), args.end());
  autograd::record_multi("split_batch", inputs, recorded, std::move(bw));
  if (!recorded.empty() && recorded[0].impl()->grad_fn) recorded[0].impl()->grad_fn->timed = false;
  return merged;
}

}  // namespace booster::nn
