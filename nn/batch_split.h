// Batch shares over threads: each OpenMP thread runs its own rows of a batch through the
// whole forward and, later, the whole backward, each op of a share on one thread, instead of
// every op splitting its work over all the threads. What one thread writes only that thread
// reads again, as with one rank per thread under data parallelism, without the process per
// thread: on a CPU whose threads sit in different L3 domains (two CCDs of an EPYC) a ViT-Ti
// step in one process of 2 threads ran 5-8 % faster this way (vit_benchmark, README); on one
// L3 it ran the same. The shares' parameter gradients are summed once, at the end.
#pragma once

#include <concepts>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "nn/module.h"

namespace booster::nn {

/// How one output tensor of a forward combines over batch shares.
enum class BatchMerge {
  concat,  // rows of the batch: the shares' outputs one after the other along dim 0
  mean,    // a mean over the batch: the shares' means weighted by their weights (rows unless given)
};

/// One share's forward: its output tensors and how each combines.
struct ShareOutput {
  std::vector<Tensor> tensors;
  std::vector<BatchMerge> merge;
  /// The share's weight in the mean merges (the items its means are over: a language
  /// model's counted labels); negative: its rows. Where every share's weight is 0, rows.
  double weight = -1;
};

/// Runs forward(s, args_s) for every share s in [0, shares) at once, one thread each; args_s
/// holds share s's rows of every defined arg (all of one batch size along dim 0; undefined
/// args stay undefined). Every share must return the same outputs (count, kinds, undefined
/// ones) and touch no state but its own graph; its random draws (dropout) come from a
/// generator of its own, seeded from one draw of the caller's default generator. Returns the combined outputs, which carry one
/// backward: the shares' backwards at once, one thread each (autograd::grad), then the
/// gradients of `params` summed over the shares and those of args that require grad joined.
/// Ops inside a share run on its thread only (oneDNN and the own kernels see a nested region).
std::vector<Tensor> split_batch(int shares, const std::vector<Tensor>& args, const std::vector<Tensor>& params,
                                const std::function<ShareOutput(int share, const std::vector<Tensor>& args)>& forward);

/// Shares a batch of `rows` splits into over `threads` threads: one a thread, at most one a row.
int batch_shares(int64_t rows, int threads);

/// How a model output of logits and a loss combines (ViT's, the causal LMs'): the logits'
/// rows joined, the loss the shares' means weighted by their rows; undefined ones left out.
inline std::vector<BatchMerge> logits_loss_merge(const Tensor& logits, const Tensor& loss) {
  std::vector<BatchMerge> m;
  if (logits.defined()) m.push_back(BatchMerge::concat);
  if (loss.defined()) m.push_back(BatchMerge::mean);
  return m;
}

/// How a Tensor output combines: its rows joined.
inline std::vector<BatchMerge> batch_merge(const Tensor& t) {
  return t.defined() ? std::vector<BatchMerge>{BatchMerge::concat} : std::vector<BatchMerge>{};
}

/// Output types split_batch_as can combine: those with a batch_merge overload (found by
/// argument-dependent lookup) giving a rule per tensor visit_tensors visits, in its order.
template <typename Out>
concept BatchMergeable = requires(const Out& o) {
  { batch_merge(o) } -> std::same_as<std::vector<BatchMerge>>;
};

/// Outputs whose means are over something other than rows say so: batch_weight(o) is what
/// the output's means are over (a causal LM's counted labels), set_batch_weight(o, w) sets
/// it on the combined output (the shares' sum).
template <typename Out>
concept BatchWeighted = requires(Out& o) {
  { batch_weight(std::as_const(o)) } -> std::convertible_to<double>;
  set_batch_weight(o, 1.0);
};

/// split_batch for a forward returning Out: f(args_s) runs a share; the shares' outputs are
/// combined tensor by tensor into one Out (the means by the shares' batch_weight where Out
/// has one).
template <BatchMergeable Out, typename F>
Out split_batch_as(int shares, const std::vector<Tensor>& args, const std::vector<Tensor>& params, F&& f) {
  std::vector<Out> outs(static_cast<size_t>(shares));
  std::vector<Tensor> merged = split_batch(shares, args, params, [&](int s, const std::vector<Tensor>& a) {
    Out& o = outs[static_cast<size_t>(s)];
    o = f(a);
    ShareOutput share;
    visit_tensors(o, [&](Tensor& t) { share.tensors.push_back(t); });
    share.merge = batch_merge(o);
    if constexpr (BatchWeighted<Out>) share.weight = double(batch_weight(std::as_const(o)));
    return share;
  });
  size_t k = 0;
  visit_tensors(outs[0], [&](Tensor& t) { t = merged[k++]; });
  if constexpr (BatchWeighted<Out>) {
    double total = 0;
    for (const Out& o : outs) total += double(batch_weight(o));
    set_batch_weight(outs[0], total);
  }
  return outs[0];
}

}  // namespace booster::nn
