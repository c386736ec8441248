// Sequence parallelism's linears with their communication overlapped (Colossal-AI's
// sequence_parallelism_mode "ring", what enable_sequence_overlap asks for): split_gather's
// all-gather before a column-parallel linear and reduce-scatter after a row-parallel one move
// round the tensor-parallel group a token shard at a time, each shard multiplied while the
// next is on the wire, instead of one collective before (or after) one product.
//   column: out[rows of shard j] = shard_j W as shard j arrives (the ring passes the input's
//     shards on); backward: dW = sum_j shard_j^T dY[rows j] round the same ring, and dX as a
//     ring reduce-scatter of dY W, each partial product computed while the sums travel.
//   row: y = this rank's rows of x W summed over the group, a ring reduce-scatter whose
//     partial for each shard of rows is multiplied while the previous sum travels; backward:
//     dX[rows j] = dY_j W^T and dW += dY_j^T x[rows j] as dY's shards go round.
// Shards are even ([B, T / tp, F], the sequence dim 1); each rank keeps only its own shard of
// the input for backward, as Megatron's sequence parallelism does.
#pragma once

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::nn {

/// x [B, t, in] (this rank's tokens) -> [B, t x tp, out] = gather(x) W (+ bias), the gather
/// done round the ring. `in_out`: the weight is [in, out] (GPT-2's Conv1D), else [out, in].
Tensor ring_gathered_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroup& tp,
                            bool in_out);

/// x [B, T, in / tp] (all the tokens, this rank's input features) -> [B, T / tp, out]: this
/// rank's rows of x W summed over the group, round the ring (no bias: the caller adds it).
Tensor ring_scattered_linear(const Tensor& x, const Tensor& weight, const dist::ProcessGroup& tp, bool in_out);

}  // namespace booster::nn
