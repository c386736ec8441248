// Vocabulary parallelism (Colossal-AI's VocabParallelEmbedding1D, VocabParallelLMHead1D and
// cross_entropy_1d): the token embedding table and the language-model head are split by
// vocabulary rows over the tensor-parallel group, and the loss is computed on the split
// logits, so no rank holds whole logits. The split follows Colossal-AI's padding: the
// vocabulary is rounded up to a multiple of make_vocab_size_divisible_by x tp and each rank
// owns an equal range of the padded vocabulary. Here the padded rows are not stored: a rank
// holds the real rows of its range (the last rank fewer), so the padded columns take no
// part in the softmax or the loss, and the parameters are regions of the true [vocab, E]
// tensor: checkpoints and exports hold the true vocabulary and load at any layout.
#pragma once

#include "core/dist/process_group.h"
#include "nn/layers.h"

namespace booster::nn {

/// A tensor-parallel rank's share of the vocabulary.
struct VocabPartition {
  int64_t vocab_size = 0;   // the true vocabulary
  int64_t padded_size = 0;  // rounded up to make_vocab_size_divisible_by x tp
  int64_t begin = 0, end = 0;  // this rank's real rows [begin, end)
  int64_t size() const { return end - begin; }
  /// Rank `rank` of `tp`'s range; ValueError naming the sizes when a rank would own only
  /// padding (a small vocabulary over many ranks: lower make_vocab_size_divisible_by).
  static VocabPartition of(int64_t vocab_size, int tp, int rank, int64_t make_vocab_size_divisible_by);
};

/// What the loss needs to know of a head whose logits are vocabulary shards (both split
/// modules are one).
class VocabParallelHead {
 public:
  VocabParallelHead(const dist::ProcessGroup& tp, VocabPartition part, bool gather_output)
      : tp_(tp), part_(part), gather_(gather_output) {}
  virtual ~VocabParallelHead() = default;
  const VocabPartition& partition() const { return part_; }
  const dist::ProcessGroup& group() const { return tp_; }
  /// True when the head gathers whole logits (parallel_output = false).
  bool gathers_output() const { return gather_; }
  /// The mean loss of hidden [N, E] (replicated) against targets [N] over this rank's rows
  /// `weight`, without whole or split logits (linear_cross_entropy; the same on every rank).
  Tensor head_loss(const Tensor& hidden, const Tensor& weight, const Tensor& targets) const;

 protected:
  /// hidden [..., E] (replicated) times this rank's rows `weight` -> its logits (or whole).
  Tensor logits(const Tensor& hidden, const Tensor& weight) const;
  const dist::ProcessGroup& tp_;
  VocabPartition part_;
  bool gather_;
};

/// Token embeddings split by vocabulary rows: each rank looks up the ids it owns (zeros for
/// the others) and the ranks' partial embeddings are summed. A head tied to it projects onto
/// this rank's rows (project()).
class VocabParallelEmbedding1D : public Embedding, public VocabParallelHead {
 public:
  /// Shards `native` (an Embedding) in place; a VocabParallelEmbedding1D is returned as is.
  static std::shared_ptr<Embedding> from_native_module(const std::shared_ptr<Module>& native, const dist::ProcessGroup& tp,
                                                       int64_t make_vocab_size_divisible_by, bool gather_output);
  VocabParallelEmbedding1D(Tensor weight, const dist::ProcessGroup& tp, VocabPartition part, bool gather_output);
  std::string type_name() const override { return "VocabParallelEmbedding1D"; }
  /// ids [...] (any id of the whole vocabulary) -> [..., E], replicated over tp.
  Tensor forward(const Tensor& ids) override;
  /// The tied head: hidden [..., E] (replicated) -> this rank's logits [..., partition().size()]
  /// (whole logits [..., vocab] when gathering).
  Tensor project(const Tensor& hidden) override { return logits(hidden, weight); }
  Tensor project_loss(const Tensor& hidden, const Tensor& targets) override { return head_loss(hidden, weight, targets); }

 protected:
  std::shared_ptr<Module> fresh() const override;
};

/// The language-model head split by vocabulary rows (weight [vocab, E] -> this rank's rows).
class VocabParallelLMHead1D : public Linear, public VocabParallelHead {
 public:
  static std::shared_ptr<Linear> from_native_module(const std::shared_ptr<Module>& native, const dist::ProcessGroup& tp,
                                                    int64_t make_vocab_size_divisible_by, bool gather_output);
  VocabParallelLMHead1D(Tensor weight, Tensor bias, const dist::ProcessGroup& tp, VocabPartition part, bool gather_output);
  std::string type_name() const override { return "VocabParallelLMHead1D"; }
  /// hidden [..., E] (replicated) -> logits [..., partition().size()] (or whole when gathering).
  Tensor forward(const Tensor& hidden) override { return logits(hidden, weight); }

 protected:
  std::shared_ptr<Module> fresh() const override;
};

/// Cross entropy of vocabulary-split logits (Colossal-AI's cross_entropy_1d): logits [N, this
/// rank's columns], targets [N] ids of the whole vocabulary (ignore_index skipped) -> the
/// mean loss [], the same on every rank of `tp`. The maximum, the sum of exponentials and the
/// target's logit are all-reduced; backward is (softmax - one-hot) / count on this rank's
/// columns. Computed in f32 whatever the logits' dtype.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const dist::ProcessGroup& tp,
                                    const VocabPartition& part, int64_t ignore_index = -100);

/// Whole logits [..., vocab] from every rank's columns (backward: this rank's columns).
Tensor gather_vocab(const Tensor& logits, const dist::ProcessGroup& tp, const VocabPartition& part);

}  // namespace booster::nn
