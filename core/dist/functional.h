// Communication that takes part in autograd: Megatron's pairs, with Colossal-AI's names.
// Each is an op whose backward is the matching collective, so tensor- and sequence-
// parallel layers are compositions of ops, never hand-written calls inside a forward.
// Dims split or gathered divide evenly by the group size (ShapeError otherwise), unless
// the op is told the split is balanced: then rank r holds balanced_chunk(full, size, r) (a
// ViT's 197 tokens over 2 ranks: 99 and 98), and a gather is told the full size.
#pragma once

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::dist {

/// Forward: identity; backward: all-reduce (sum) of the gradient (before a column-parallel
/// linear: every rank's input gradient is a partial sum).
Tensor reduce_backward(const Tensor& x, const ProcessGroup& g);
/// Forward: all-reduce (sum); backward: identity (after a row-parallel linear).
Tensor reduce_forward(const Tensor& x, const ProcessGroup& g);
/// Rank r's share [first, first + count) of n elements over `parts` ranks: n / parts each,
/// one more for the first n % parts ranks.
std::pair<int64_t, int64_t> balanced_chunk(int64_t n, int parts, int r);

/// Forward: this rank's chunk along dim; backward: all-gather along dim.
Tensor split_forward_gather_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, bool balanced = false);
/// Forward: all-gather along dim into `full` elements (-1: size x group size); backward:
/// this rank's chunk of the gradient.
Tensor gather_forward_split_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, int64_t full = -1);
/// Forward: reduce-scatter (sum) along dim; backward: all-gather along dim (sequence
/// parallelism after a row-parallel linear).
Tensor reducescatter_forward_gather_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, bool balanced = false);
/// Forward: all-gather along dim into `full` elements (-1: size x group size); backward:
/// reduce-scatter (sum) along dim (sequence parallelism before a column-parallel linear).
Tensor gather_forward_reducescatter_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, int64_t full = -1);
/// Without history: every rank's x concatenated along dim (an all-gather; x itself on a group of one).
Tensor all_gather_along(const Tensor& x, int64_t dim, const ProcessGroup& g);
/// Without history: this rank's chunk along dim of the sum over ranks of x (a reduce-scatter;
/// x itself on a group of one). The dim divides by the group size (ShapeError otherwise).
Tensor reduce_scatter_along(const Tensor& x, int64_t dim, const ProcessGroup& g);
/// Without history: the sum over ranks of x (a new tensor).
Tensor all_reduce_sum(const Tensor& x, const ProcessGroup& g);
/// Forward: splits along scatter_dim, sends chunk r to rank r and concatenates what it
/// receives along gather_dim into `full` elements (-1: size x group size); backward: the
/// same with the dims exchanged. Balanced: the scatter dim splits as balanced_chunk, and
/// rank r's block along the gathered dim is its balanced share of `full` (Ulysses: heads
/// scattered, a ViT's 197 tokens gathered from shards of 99 and 98).
Tensor all_to_all_along(const Tensor& x, int64_t scatter_dim, int64_t gather_dim, const ProcessGroup& g,
                        bool balanced = false, int64_t full = -1);

}  // namespace booster::dist
