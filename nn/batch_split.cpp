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

}  // namespace

int batch_shares(int64_t rows, int threads) { return int(std::max<int64_t>(1, std::min<int64_t>(threads, rows))); }

std::vector<Tensor> split_batch(int shares, const std::vector<Tensor>& args, const std::vector<Tensor>& params,
                                const std::function<ShareOutput(int share, const std::vector<Tensor>& args)>& forward) {
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
  std::vector<int64_t> begin(static_cast<size_t>(shares) + 1);
  for (int s = 0; s <= shares; ++s) begin[size_t(s)] = rows * s / shares;

  // Each share's inputs: its rows of every arg, as a leaf of its own (an arg's gradient is
  // joined from the shares' in the backward, so no share's graph reaches another's).
  std::vector<std::vector<Tensor>> share_args(static_cast<size_t>(shares));
  for (int s = 0; s < shares; ++s)
    for (const Tensor& a : args) {
      Tensor part;
      if (a.defined()) {
        part = a.detach().narrow(0, begin[size_t(s)], begin[size_t(s) + 1] - begin[size_t(s)]);
        if (a.requires_grad()) part.requires_grad_(true);
      }
      share_args[size_t(s)].push_back(part);
    }
  std::vector<Tensor> trained;  // the parameters a gradient is computed for
  for (const Tensor& p : params)
    if (p.defined() && p.requires_grad()) trained.push_back(p);

  std::vector<ShareOutput> outs(static_cast<size_t>(shares));
  // Each share draws (dropout) from a generator of its own, seeded from one draw of the
  // caller's: the same masks on every run of the same seed and share count, no two threads
  // advancing one generator.
  const uint64_t seed = default_generator().next_u64();
  on_share_threads(shares, [&](int s) {
    Generator g(seed, uint64_t(s));
    DefaultGeneratorGuard own(g);
    outs[size_t(s)] = forward(s, share_args[size_t(s)]);
  });
  const ShareOutput& first = outs[0];
  BOOSTER_CHECK(first.merge.size() == first.tensors.size(), "split_batch: ", first.tensors.size(), " outputs but ",
                first.merge.size(), " merge rules");
  for (int s = 1; s < shares; ++s) {
    const ShareOutput& o = outs[size_t(s)];
    BOOSTER_CHECK(o.tensors.size() == first.tensors.size() && o.merge == first.merge, "split_batch: share ", s,
                  " returned other outputs than share 0");
    for (size_t i = 0; i < o.tensors.size(); ++i)
      BOOSTER_CHECK(o.tensors[i].defined() == first.tensors[i].defined(), "split_batch: output ", i,
                    " is defined in one share and not in another");
  }

  // The combined outputs, without history of their own; one node gives them a backward.
  std::vector<Tensor> merged;
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    if (!first.tensors[i].defined()) {
      merged.push_back(Tensor());
      continue;
    }
    std::vector<Tensor> parts;
    for (auto& o : outs) parts.push_back(o.tensors[i].detach());
    if (first.merge[i] == BatchMerge::concat) {
      for (int s = 0; s < shares; ++s)
        BOOSTER_CHECK_T(ShapeError, parts[size_t(s)].dim() >= 1 && parts[size_t(s)].size(0) == begin[size_t(s) + 1] - begin[size_t(s)],
                        "split_batch: output ", i, " of share ", s, " is ", shape_str(parts[size_t(s)].shape()),
                        ", not the share's ", begin[size_t(s) + 1] - begin[size_t(s)], " rows");
      merged.push_back(concat(parts, 0));
    } else {
      Tensor sum = Tensor::zeros(parts[0].shape(), DType::f32);
      for (int s = 0; s < shares; ++s) {
        BOOSTER_CHECK_T(ShapeError, parts[size_t(s)].shape() == parts[0].shape(), "split_batch: output ", i,
                        " has other shapes in different shares");
        Tensor w = parts[size_t(s)].to(DType::f32).contiguous().clone();
        kernels::scale_(w, double(begin[size_t(s) + 1] - begin[size_t(s)]) / double(rows));
        kernels::add_(sum, w);
      }
      merged.push_back(sum.to(parts[0].dtype()));
    }
  }

  std::vector<Tensor> inputs = trained;
  inputs.insert(inputs.end(), args.begin(), args.end());
  std::vector<Tensor> recorded;  // the defined outputs (record_multi wants tensors)
  for (const Tensor& m : merged)
    if (m.defined()) recorded.push_back(m);
  auto backward = [outs, share_args, begin, rows, n_trained = trained.size(), trained,
                   arg_grad = [&] {
                     std::vector<bool> g;
                     for (const Tensor& a : args) g.push_back(a.defined() && a.requires_grad());
                     return g;
                   }()](const std::vector<Tensor>& g) {
    const int shares = int(outs.size());
    // Each share's roots and seeds: its rows of a joined output's gradient, its weight of a mean's.
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(shares));
    on_share_threads(shares, [&](int s) {
        std::vector<Tensor> roots, seeds;
        const ShareOutput& o = outs[size_t(s)];
        const int64_t b = begin[size_t(s)], n = begin[size_t(s) + 1] - b;
        for (size_t i = 0, k = 0; i < o.tensors.size(); ++i) {
          if (!o.tensors[i].defined()) continue;
          const Tensor& gi = g[k++];
          if (!gi.defined() || !o.tensors[i].requires_grad()) continue;
          roots.push_back(o.tensors[i]);
          if (o.merge[i] == BatchMerge::concat) {
            seeds.push_back(gi.narrow(0, b, n).contiguous());
          } else {
            Tensor w = gi.to(DType::f32).contiguous().clone();
            kernels::scale_(w, double(n) / double(rows));
            seeds.push_back(w.to(o.tensors[i].dtype()));
          }
        }
        std::vector<Tensor> wrt = trained;
        for (size_t a = 0; a < arg_grad.size(); ++a)
          if (arg_grad[a]) wrt.push_back(share_args[size_t(s)][a]);
        if (!roots.empty()) grads[size_t(s)] = autograd::grad(roots, seeds, wrt);
        else grads[size_t(s)].resize(wrt.size());
      });
    std::vector<Tensor> result;
    for (size_t p = 0; p < n_trained; ++p) {  // the first share's gradient takes the others'
      Tensor sum;
      for (auto& gs : grads) {
        Tensor g = std::move(gs[p]);
        if (!g.defined()) continue;
        if (!sum.defined()) sum = g.is_contiguous() && g.is_sole_owner() ? g : g.contiguous().clone();
        else kernels::add_(sum, g);
      }
      result.push_back(sum);
    }
    for (size_t a = 0, k = n_trained; a < arg_grad.size(); ++a) {
      if (!arg_grad[a]) {
        result.push_back(Tensor());
        continue;
      }
      std::vector<Tensor> parts;
      for (int s = 0; s < shares; ++s) {
        const Tensor& gs = grads[size_t(s)][k];
        const Tensor& leaf = share_args[size_t(s)][a];
        parts.push_back(gs.defined() ? gs : Tensor::zeros(leaf.shape(), leaf.dtype()));
      }
      result.push_back(concat(parts, 0));
      ++k;
    }
    return result;
  };
  autograd::record_multi("split_batch", inputs, recorded, backward);
  if (!recorded.empty() && recorded[0].impl()->grad_fn) recorded[0].impl()->grad_fn->timed = false;
  for (size_t i = 0, k = 0; i < merged.size(); ++i)
    if (merged[i].defined()) merged[i] = recorded[k++];
  return merged;
}

}  // namespace booster::nn
