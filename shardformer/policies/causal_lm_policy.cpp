// The GPT-2 and LLaMA shardformer policies (see causal_lm_policy.h).
#include "shardformer/policies/causal_lm_policy.h"

#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/parallel/conv1d_1d.h"
#include "nn/parallel/sp_attention.h"
#include "nn/parallel/vocab_parallel.h"
#include "shardformer/policies/factories.h"

namespace booster::shardformer {

namespace {

template <typename Model>
const Model& model_of(const nn::Module& model, const std::string& policy, const char* type) {
  auto* m = dynamic_cast<const Model*>(&model);
  BOOSTER_CHECK(m != nullptr, policy, ": expects a ", type, ", got a ", model.type_name(),
                " (write a Policy for it and pass it as custom_policy)");
  return *m;
}

// What both policies refuse: a grid; Ulysses or ring attention beside tensor parallelism; a
// mode not done.
void common_checks(const std::string& policy, const ShardConfig& config) {
  BOOSTER_CHECK(!config.grid, policy, ": tensor parallelism of a language model is 1D; the ",
                config.grid ? config.grid->describe() : "", " (tp_mode 2d, 2.5d, 3d) is the ViT's");
  if (!config.enable_sequence_parallelism) return;
  const std::string& m = config.sequence_parallelism_mode;
  BOOSTER_CHECK(m == "split_gather" || m == "ring" || m == "all_to_all" || m == "ring_attn", policy,
                ": sequence_parallelism_mode '", m, "' is not implemented for language models");
  BOOSTER_CHECK(!config.sp_axis() || config.tp_size() == 1, policy, ": ", m, " runs on whole weights here; ",
                "the tensor-parallel size must be 1, got ", config.tp_size());
}

// The tensor-parallel linears' options: under split_gather (and ring, its overlapped form), on
// token shards (the model's own split, set by preprocess; or, without one, always: a Galvatron
// layer splits them).
nn::Linear1DOptions tp_options(const ShardConfig& config, const std::shared_ptr<nn::SequenceSplit>& split) {
  nn::Linear1DOptions o;
  o.seq_parallel = config.enable_sequence_parallelism && !config.sp_axis();
  o.ring = config.sequence_overlap();
  o.split = split;
  return o;
}
ModuleFactory sp_norm(bool rms) {
  return [rms](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return rms ? nn::SequenceParallelRMSNorm::from_native_module(m, c.tp_group())
               : nn::SequenceParallelLayerNorm::from_native_module(m, c.tp_group());
  };
}
// Ulysses' or ring attention's replacement of an attention, over the sp group.
template <typename Attention>
ModuleFactory sp_attention() {
  return [](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return Attention::from_native_module(m, c.sp_group(), c.ring_attn() ? nn::SequenceMode::ring : nn::SequenceMode::ulysses);
  };
}
// A vocabulary that leaves a rank only padding (checked for every rank, so all refuse alike).
void vocabulary_splits(const ShardConfig& config, int64_t vocab_size) {
  for (int r = 0; r < config.tp_size(); ++r)
    nn::VocabPartition::of(vocab_size, config.tp_size(), r, config.make_vocab_size_divisible_by);
}

void divides(const std::string& policy, const char* what, int64_t n, int tp, const char* size = "tp_size") {
  BOOSTER_CHECK(n % tp == 0, policy, ": ", what, " ", n, " does not divide by ", size, " ", tp);
}

ModuleFactory vocab_embedding() {
  return [](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::VocabParallelEmbedding1D::from_native_module(m, c.tp_group(), c.make_vocab_size_divisible_by,
                                                            !c.parallel_output);
  };
}
ModuleFactory vocab_head() {
  return [](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::VocabParallelLMHead1D::from_native_module(m, c.tp_group(), c.make_vocab_size_divisible_by,
                                                         !c.parallel_output);
  };
}
ModuleFactory conv_column(int64_t n_fused, nn::Linear1DOptions o) {
  return [n_fused, o](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::GPT2FusedLinearConv1DCol::from_native_module(m, c.tp_group(), n_fused, o);
  };
}
ModuleFactory conv_row(nn::Linear1DOptions o) {
  return [o](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::GPT2FusedLinearConv1DRow::from_native_module(m, c.tp_group(), o);
  };
}

}  // namespace

void GPT2LMHeadModelPolicy::config_sanity_check(const nn::Module& model, const ShardConfig& config) const {
  const auto& c = model_of<nn::GPT2LMHeadModel>(model, name(), "GPT2LMHeadModel").config();
  common_checks(name(), config);
  if (config.ring_attn()) return;
  if (config.ulysses()) return divides(name(), "n_head", c.n_head, config.sp_group().size(), "sp_size");
  const int tp = config.tp_size();
  divides(name(), "n_head", c.n_head, tp);
  divides(name(), "n_inner", c.inner(), tp);
  vocabulary_splits(config, c.vocab_size);
}

void GPT2LMHeadModelPolicy::preprocess(nn::Module& model, const ShardConfig& config) const {
  dynamic_cast<nn::GPT2LMHeadModel&>(model).transformer->sequence_split = config.token_split();
}

std::map<std::string, ModulePolicyDescription> GPT2LMHeadModelPolicy::module_policy(const nn::Module& model,
                                                                                    const ShardConfig& config) const {
  const auto& gpt2 = model_of<nn::GPT2LMHeadModel>(model, name(), "GPT2LMHeadModel");
  const auto& c = gpt2.config();
  std::map<std::string, ModulePolicyDescription> p;
  if (config.sp_axis()) {  // whole weights; the attention exchanges heads for tokens, or passes keys round
    p["GPT2Block"].sub_module_replacement = {{"attn", sp_attention<nn::SequenceParallelGPT2Attention>()}};
    return p;
  }
  const nn::Linear1DOptions o = tp_options(config, gpt2.transformer->sequence_split);  // split_gather: token shards
  const bool split = o.seq_parallel;
  p["GPT2Model"].sub_module_replacement = {{"wte", vocab_embedding()}, {"drop", dropout(false)}};
  auto& block = p["GPT2Block"];
  block.attribute_replacement = {{"attn.num_heads", int64_t(c.n_head / config.tp_size())}};
  block.sub_module_replacement = {
      {"attn.c_attn", conv_column(3, o)}, {"attn.c_proj", conv_row(o)}, {"attn.resid_dropout", dropout(split)},
      {"mlp.c_fc", conv_column(1, o)},    {"mlp.c_proj", conv_row(o)},  {"mlp.dropout", dropout(split)},
  };
  if (split) block.sub_module_replacement.insert(block.sub_module_replacement.end(), {{"ln_1", sp_norm(false)},
                                                                                     {"ln_2", sp_norm(false)}});
  if (!c.tie_word_embeddings) p["GPT2LMHeadModel"].sub_module_replacement = {{"lm_head", vocab_head()}};
  return p;
}

void LlamaForCausalLMPolicy::config_sanity_check(const nn::Module& model, const ShardConfig& config) const {
  const auto& c = model_of<nn::LlamaForCausalLM>(model, name(), "LlamaForCausalLM").config();
  common_checks(name(), config);
  if (config.ring_attn()) return;
  const int tp = config.ulysses() ? config.sp_group().size() : config.tp_size();
  const char* size = config.ulysses() ? "sp_size" : "tp_size";
  BOOSTER_CHECK(c.num_attention_heads % tp == 0, name(), ": num_attention_heads ", c.num_attention_heads,
                " does not divide by ", size, " ", tp);
  BOOSTER_CHECK(c.kv_heads() % tp == 0, name(), ": num_key_value_heads ", c.kv_heads(), " does not divide by ", size, " ",
                tp, config.ulysses() ? " (Ulysses scatters the key/value heads too)"
                                     : " (grouped key/value heads are divided over the ranks, each serving its query heads)");
  if (config.ulysses()) return;
  divides(name(), "intermediate_size", c.intermediate_size, tp);
  vocabulary_splits(config, c.vocab_size);
}

void LlamaForCausalLMPolicy::preprocess(nn::Module& model, const ShardConfig& config) const {
  dynamic_cast<nn::LlamaForCausalLM&>(model).model->sequence_split = config.token_split();
}

std::map<std::string, ModulePolicyDescription> LlamaForCausalLMPolicy::module_policy(const nn::Module& model,
                                                                                     const ShardConfig& config) const {
  const auto& llama = model_of<nn::LlamaForCausalLM>(model, name(), "LlamaForCausalLM");
  const auto& c = llama.config();
  const int tp = config.tp_size();
  std::map<std::string, ModulePolicyDescription> p;
  if (config.sp_axis()) {  // whole weights; the attention exchanges heads for tokens, or passes keys round
    p["LlamaDecoderLayer"].sub_module_replacement = {{"self_attn", sp_attention<nn::SequenceParallelLlamaAttention>()}};
    return p;
  }
  const nn::Linear1DOptions o = tp_options(config, llama.model->sequence_split);  // split_gather: token shards
  const bool split = o.seq_parallel;
  p["LlamaModel"].sub_module_replacement = {{"embed_tokens", vocab_embedding()}};
  auto& layer = p["LlamaDecoderLayer"];
  layer.attribute_replacement = {{"self_attn.num_heads", int64_t(c.num_attention_heads / tp)},
                                 {"self_attn.num_key_value_heads", int64_t(c.kv_heads() / tp)}};
  layer.sub_module_replacement = {
      {"self_attn.q_proj", column(o)}, {"self_attn.k_proj", column(o)}, {"self_attn.v_proj", column(o)},
      {"self_attn.o_proj", row(o)},    {"mlp.gate_proj", column(o)},    {"mlp.up_proj", column(o)},
      {"mlp.down_proj", row(o)},
  };
  if (split) layer.sub_module_replacement.insert(layer.sub_module_replacement.end(),
                                                 {{"input_layernorm", sp_norm(true)}, {"post_attention_layernorm", sp_norm(true)}});
  if (!c.tie_word_embeddings) p["LlamaForCausalLM"].sub_module_replacement = {{"lm_head", vocab_head()}};
  return p;
}

}  // namespace booster::shardformer
