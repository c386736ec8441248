// The shardformer policy of Hugging Face's ViT (Colossal-AI's ViTForImageClassification
// policy): query, key, value and intermediate.dense column-parallel; attention.output.dense
// and output.dense row-parallel; heads and all_head_size per rank; dropouts on replicated
// activations drawing alike over the tp group; the classifier column-parallel with its
// output gathered (kept whole, replicated, when num_labels does not divide by tp: beans has
// 3 labels). Sequence parallelism (split_gather), which Colossal-AI turns off for ViT, is
// done: the encoder splits the tokens (balanced when they do not divide: 197 over 2 is 99
// and 98), LayerNorm, dropout and the residuals run on token shards, each block's
// LayerNorms all-gather their output for the column-parallel linears, the row-parallel
// linears reduce-scatter, and the encoder gathers the tokens back at its end. Ulysses
// (all_to_all, over the sequence-parallel group, tp 1): whole weights, token shards, and
// the self-attention exchanging heads for tokens (nn::UlyssesViTSelfAttention).
#pragma once

#include "shardformer/policy.h"

namespace booster::shardformer {

class ViTPolicy : public Policy {
 public:
  std::string name() const override { return "ViTForImageClassificationPolicy"; }
  void config_sanity_check(const nn::Module& model, const ShardConfig& config) const override;
  std::map<std::string, ModulePolicyDescription> module_policy(const nn::Module& model,
                                                                const ShardConfig& config) const override;
  void postprocess(nn::Module& model, const ShardConfig& config) const override;
};

}  // namespace booster::shardformer
