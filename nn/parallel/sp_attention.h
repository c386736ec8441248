// The language models' attentions on token shards of a sequence-parallel group of their own
// (HybridParallelPlugin's sp axis), in either of its modes: Ulysses (all_to_all: q, k, v
// exchanged for whole sequences of some heads, ulysses_attention.h) or ring attention
// (ring_attn: zigzag shards, the keys and values passed round, ring_attention.h). Each adopts
// the model's own attention (its projections, names unchanged) and keeps its type name per
// mode (UlyssesGPT2Attention, RingGPT2Attention, ...). Generating with a cache runs the
// adopted attention's own forward_cached on whole sequences.
#pragma once

#include <memory>

#include "core/dist/process_group.h"
#include "nn/gpt2.h"
#include "nn/llama.h"

namespace booster::nn {

enum class SequenceMode { ulysses, ring };

/// A model's attention (GPT2Attention, LlamaAttention) on token shards of `sp`. GPT-2's:
/// [B, T / sp, E] -> [B, T / sp, E]; LLaMA's grouped-query one with rotary embeddings at the
/// tokens' own positions (Ulysses: after the exchange, over the whole sequence; the ring: each
/// zigzag chunk at its offset). Under Ulysses the heads (LLaMA's key/value heads too) divide by sp.
template <typename Native>
class SequenceParallelAttention : public Native {
 public:
  SequenceParallelAttention(const Native& native, const dist::ProcessGroup& sp, SequenceMode mode);
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& sp, SequenceMode mode);
  /// "UlyssesGPT2Attention", "RingLlamaAttention", ...
  std::string type_name() const override;
  Tensor forward(const Tensor& hidden) override;

 protected:
  std::shared_ptr<Module> fresh() const override;

 private:
  const dist::ProcessGroup& sp_;
  SequenceMode mode_;
};

using SequenceParallelGPT2Attention = SequenceParallelAttention<GPT2Attention>;
using SequenceParallelLlamaAttention = SequenceParallelAttention<LlamaAttention>;

}  // namespace booster::nn
