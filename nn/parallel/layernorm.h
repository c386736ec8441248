// LayerNorm and LLaMA's RMSNorm on sequence shards (sequence parallelism): each tensor-parallel rank normalizes
// its own tokens with the replicated weight and bias, whose gradients are then partial
// sums; they are completed over the tp group in backward (copy forward, all-reduce
// backward), so every rank holds the same full gradient as without the split. With
// gather_output the normalized shards are all-gathered along the sequence for the
// column-parallel linears that follow (one gather for query, key and value), and their
// gradient reduce-scattered.
#pragma once

#include "core/dist/process_group.h"
#include "nn/layers.h"
#include "nn/llama.h"

namespace booster::nn {

class SequenceParallelLayerNorm : public LayerNorm {
 public:
  /// Adopts `native`'s (an affine LayerNorm) weight and bias handles and eps.
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& tp, int64_t gather_seq_len = 0,
                                                         int64_t seq_dim = 1);
  /// gather_seq_len > 0: all-gather the output along seq_dim into that many tokens.
  SequenceParallelLayerNorm(Tensor weight, Tensor bias, double eps, const dist::ProcessGroup& tp,
                            int64_t gather_seq_len, int64_t seq_dim);
  std::string type_name() const override { return "SequenceParallelLayerNorm"; }
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override;
  const dist::ProcessGroup& tp_;
  int64_t gather_len_, seq_dim_;
};

/// LLaMA's RMSNorm on sequence shards: its weight's gradient completed over tp in backward.
class SequenceParallelRMSNorm : public LlamaRMSNorm {
 public:
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& tp);
  SequenceParallelRMSNorm(Tensor weight, double eps, const dist::ProcessGroup& tp)
      : LlamaRMSNorm(std::move(weight), eps), tp_(tp) {}
  std::string type_name() const override { return "SequenceParallelRMSNorm"; }
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override;
  const dist::ProcessGroup& tp_;
};

}  // namespace booster::nn
