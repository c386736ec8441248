// Ring attention (Colossal-AI's sequence_parallelism_mode "ring_attn"): causal attention over
// a sequence split across the sequence-parallel group, each rank keeping its own queries while
// the keys and values travel round the ring, one block a step, combined by their log-sum-exps
// (FlashAttention's blocks; no rank ever holds the whole sequence's keys). The split is
// zigzag, as Colossal-AI's: the sequence is cut into 2 x sp chunks and rank r holds chunks r
// and 2 sp - 1 - r, so every rank has as much causal work as every other: at each step after
// the first a rank attends either its two chunks to the arriving rank's first chunk (an earlier
// rank) or its later chunk to both of the arriving rank's (a later one), the same number of
// products either way, and nobody waits on a masked half. The next block is sent and received
// while this one is multiplied. The backward sends the keys and values round again, each with
// the gradients gathered for it so far, which end back at their owner after the last step.
// The ranks are data parallel too (their gradients sum over dp x sp), as under Ulysses.
// Attention dropout draws each probability's mask from a counter-based generator keyed by one
// draw of the default generator a call, so the backward (and a checkpointed layer's replay)
// sees the same masks; with dropout the blocks run on the reference rows, not the AVX-512
// kernels. Key/value heads are repeated to the query heads before the ring (they travel
// repeated). GPT-2's and LLaMA's attentions run it under sp_attention.h.
#pragma once

#include <memory>

#include <utility>

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::nn {

/// q, k, v: [B, h, t, d], this rank's two zigzag chunks (t / 2 tokens each, chunk r then chunk
/// 2 sp - 1 - r). Returns the context [B, h, t, d] in q's dtype, with autograd.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const dist::ProcessGroup& sp, double alpha,
                      double dropout_p = 0.0);

/// The positions of this rank's zigzag tokens' two chunks: {first chunk's, second chunk's}.
std::pair<int64_t, int64_t> zigzag_offsets(int64_t tokens_here, const dist::ProcessGroup& sp);

}  // namespace booster::nn
