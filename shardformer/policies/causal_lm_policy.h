// The shardformer policies of GPT-2 and LLaMA (Colossal-AI's GPT2LMHeadModelPolicy and
// LlamaForCausalLMPolicy), 1D tensor parallelism:
// - GPT-2: c_attn column-parallel with q, k and v split alike (GPT2FusedLinearConv1D_Col,
//   three parts), c_fc column-parallel; attn.c_proj and mlp.c_proj row-parallel; num_heads
//   per rank; the residual and embedding dropouts on replicated activations.
// - LLaMA: q_proj, k_proj, v_proj, gate_proj and up_proj column-parallel; o_proj and
//   down_proj row-parallel; num_heads and num_key_value_heads per rank (grouped kv heads
//   divided over the ranks, refused by name when they do not divide).
// - Both: the token embeddings and the head split by vocabulary (VocabParallelEmbedding1D,
//   VocabParallelLMHead1D; a tied head projects onto the embedding's rows), the vocabulary
//   padded to make_vocab_size_divisible_by x tp; with parallel_output the logits stay split
//   and the models' losses are the vocabulary-parallel cross entropy.
// - Sequence parallelism: split_gather (Megatron's, over the tp group: the blocks run on
//   token shards, the column-parallel projections all-gather them and the row-parallel ones
//   reduce-scatter, the norms' weights gathering their gradients, the dropouts inside the
//   blocks drawing per rank) and all_to_all (Ulysses over the sp group, tp 1: whole weights,
//   the attention exchanging heads for tokens). The model splits the tokens before its first
//   layer and gathers them after its last (nn::SequenceSplit), so pipelines carry shards.
#pragma once

#include "shardformer/policy.h"

namespace booster::shardformer {

class GPT2LMHeadModelPolicy : public Policy {
 public:
  std::string name() const override { return "GPT2LMHeadModelPolicy"; }
  void config_sanity_check(const nn::Module& model, const ShardConfig& config) const override;
  /// Gives the model its token split under sequence parallelism.
  void preprocess(nn::Module& model, const ShardConfig& config) const override;
  std::map<std::string, ModulePolicyDescription> module_policy(const nn::Module& model,
                                                                const ShardConfig& config) const override;
};

class LlamaForCausalLMPolicy : public Policy {
 public:
  std::string name() const override { return "LlamaForCausalLMPolicy"; }
  void config_sanity_check(const nn::Module& model, const ShardConfig& config) const override;
  void preprocess(nn::Module& model, const ShardConfig& config) const override;
  std::map<std::string, ModulePolicyDescription> module_policy(const nn::Module& model,
                                                                const ShardConfig& config) const override;
};

}  // namespace booster::shardformer
