// A language model's head and its loss as one op (Liger's fused linear cross entropy): the
// logits hidden x W^T are made a block of rows at a time, their cross entropy and its
// gradient (softmax - one-hot) taken in place, and the block's share of the hidden states'
// and the weight's gradients computed from it at once, so no [tokens, vocabulary] matrix
// outlives its block (GPT-2 at 4 x 1,024 tokens: 823 MB of f32 logits, and as much again
// for their gradient, on the unfused path). The backward only scales what the forward saved.
// With a tensor-parallel group the weight holds this rank's vocabulary rows (Colossal-AI's
// VocabParallelLMHead1D with cross_entropy_1d): each block's row maxima, sums of
// exponentials and target logits are all-reduced over the group.
#pragma once

#include <cstdint>

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::nn {

/// Where a head's weight rows sit in the vocabulary: rows [begin, begin + rows) of
/// vocab_size (0: the weight's own rows, the whole vocabulary); with tp, the other rows are
/// on the group's other ranks.
struct VocabSlice {
  int64_t begin = 0;
  int64_t vocab_size = 0;
  const dist::ProcessGroup* tp = nullptr;
};

/// The summed loss of the rows a cross entropy counted, and how many it counted.
struct RowsLoss {
  double total = 0;
  int64_t counted = 0;
};

/// Cross entropy of rows of logits x [n, c] (f32, contiguous: the slice's columns) against
/// targets y [n] (ids of the whole vocabulary; ignore_index rows skipped, zero gradient):
/// returns the summed loss and overwrites x with softmax - one-hot. With slice.tp the
/// maxima, the sums of exponentials and the targets' logits are all-reduced over the group,
/// so every rank returns the same sums. Targets must be checked by the caller.
RowsLoss cross_entropy_rows_in_place(float* x, const int64_t* y, int64_t n, int64_t c, const VocabSlice& slice,
                                     int64_t ignore_index);

struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;
  /// Rows a block (0: as many as keep a block's f32 logits near 128 MB, a multiple of 64).
  int64_t block_rows = 0;
};

/// Mean cross entropy of hidden [..., E] x weight [V, E]^T against targets [...] (the same
/// rows; ids of the whole vocabulary) -> [], without whole logits. hidden and weight of one
/// floating dtype; the logits are rounded to it as linear's are and the loss is taken in f32.
/// With slice.tp, hidden is replicated over the group and its gradient is this rank's part
/// (the caller sums it over the group, as dist::reduce_backward does).
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            const VocabSlice& slice = {}, const LinearCrossEntropyOptions& o = {});

}  // namespace booster::nn
