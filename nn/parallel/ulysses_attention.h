// DeepSpeed-Ulysses attention (Colossal-AI's sequence_parallelism_mode "all_to_all",
// Galvatron's use_sp): the layer runs on a shard of the tokens with whole weights; q, k and
// v go through one all-to-all each inside the sequence-parallel group, so that every rank
// holds all the tokens of heads / sp heads, attention runs whole there, and the context
// goes back to token shards through one more. Token shards are balanced (a ViT's 197 tokens
// over 2 ranks: 99 and 98); the heads (and LLaMA's key/value heads) divide by the group
// size. One exchange (ulysses_attention) serves the ViT's attention (below), GPT-2's and
// LLaMA's (sp_attention.h), under HybridParallelPlugin and GalvatronPlugin alike.
#pragma once

#include <functional>
#include <memory>

#include "core/dist/process_group.h"
#include "nn/vit.h"

namespace booster::nn {

/// Attention over all the tokens of some heads: q [B, T, hq, d], k and v [B, T, hk, d] ->
/// the context [B, T, hq, d].
using HeadsAttention = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;

/// Ulysses' exchange around `attend`: q [B, t, hq, d], k and v [B, t, hk, d] hold this rank's
/// share t of `tokens` for every head; they go to all the tokens of hq / sp (hk / sp) heads,
/// `attend` runs there, and the context comes back as this rank's tokens of every head
/// [B, t, hq, d].
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const dist::ProcessGroup& sp, int64_t tokens,
                         const HeadsAttention& attend);

class UlyssesViTSelfAttention : public ViTSelfAttention {
 public:
  /// Around a ViTSelfAttention's projections and dropout (adopted, names unchanged);
  /// `tokens`: the whole sequence's length.
  UlyssesViTSelfAttention(const ViTSelfAttention& native, const dist::ProcessGroup& sp, int64_t tokens);
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& sp, int64_t tokens);
  std::string type_name() const override { return "UlyssesViTSelfAttention"; }
  /// hidden: [B, this rank's tokens, H] -> [B, this rank's tokens, all_head_size]
  Tensor forward(const Tensor& hidden) override;

 protected:
  std::shared_ptr<Module> fresh() const override;

 private:
  const dist::ProcessGroup& sp_;
  int64_t tokens_;
};

}  // namespace booster::nn
