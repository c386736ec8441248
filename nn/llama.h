// LLaMA with Hugging Face's module structure, type names and parameter names
// (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ...): pre-norm blocks
// with RMSNorm, rotary position embeddings at rope_theta applied as transformers does
// (rotate_half on the two halves of each head), grouped-query attention (num_key_value_heads
// shared by num_attention_heads / num_key_value_heads query heads each), the SwiGLU MLP
// down(silu(gate(x)) * up(x)), and a head of its own unless tie_word_embeddings.
#pragma once

#include <utility>

#include "nn/causal_lm.h"
#include "nn/parallel/sequence_split.h"
#include "nn/gpt2.h"
#include "nn/llama_config.h"

namespace booster::nn {

/// LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight (computed in f32).
class LlamaRMSNorm : public UnaryModule {
 public:
  LlamaRMSNorm(int64_t hidden_size, double eps);
  /// Around an existing weight handle [hidden_size] (adopted).
  LlamaRMSNorm(Tensor weight, double eps);
  std::string type_name() const override { return "LlamaRMSNorm"; }
  double eps() const { return eps_; }
  Tensor forward(const Tensor& x) override { return rms_norm(x, weight, eps_); }
  TensorSlot weight;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaRMSNorm>(n_, eps_); }
  int64_t n_;
  double eps_;
};

/// SiLU as a module (the MLP's act_fn).
class SiLU : public UnaryModule {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override { return silu(x); }

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<SiLU>(); }
};

/// Query heads h from key/value heads kv along `dim` (transformers' repeat_kv: each kv head
/// serves h / kv consecutive query heads).
Tensor repeat_kv(const Tensor& x, int64_t n_rep, int64_t dim);

/// q/k/v/o projections, rotary embeddings, grouped-query causal attention.
class LlamaAttention : public UnaryModule {
 public:
  explicit LlamaAttention(const LlamaConfig& c);
  /// Around another's projections and head counts (adopted, as GPT2Attention's).
  struct Adopt {};
  LlamaAttention(const LlamaAttention& native, Adopt);
  std::string type_name() const override { return "LlamaAttention"; }
  Tensor forward(const Tensor& hidden) override { return attend(hidden, nullptr, nullptr); }  // [B, T, E]
  /// The new tokens after the cached ones (keys and values kept per key/value head).
  Tensor forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values);
  Slot<UnaryModule> q_proj, k_proj, v_proj, o_proj;
  int64_t num_heads, num_key_value_heads, head_dim;  // attributes a tensor-parallel policy divides

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaAttention>(c_); }
  Tensor attend(const Tensor& hidden, Tensor* keys, Tensor* values);
  LlamaConfig c_;
};

/// down_proj(act_fn(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public UnaryModule {
 public:
  explicit LlamaMLP(const LlamaConfig& c);
  std::string type_name() const override { return "LlamaMLP"; }
  Tensor forward(const Tensor& x) override { return down_proj(mul(act_fn(gate_proj(x)), up_proj(x))); }
  Slot<UnaryModule> gate_proj, up_proj, down_proj, act_fn;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaMLP>(c_); }
  LlamaConfig c_;
};

/// x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)).
class LlamaDecoderLayer : public UnaryModule {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& c);
  std::string type_name() const override { return "LlamaDecoderLayer"; }
  Tensor forward(const Tensor& hidden) override;
  Tensor forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values);
  Slot<UnaryModule> input_layernorm, self_attn, post_attention_layernorm, mlp;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaDecoderLayer>(c_); }
  LlamaConfig c_;
};

/// embed_tokens, layers.0 ..., norm: input_ids [B, T] -> [B, T, E].
class LlamaModel : public UnaryModule {
 public:
  explicit LlamaModel(const LlamaConfig& c);
  std::string type_name() const override { return "LlamaModel"; }
  Tensor forward(const Tensor& input_ids) override { return norm(layers_range(embed(input_ids), 0, int64_t(layers->size()))); }
  /// Token embeddings; ids past the vocabulary, a sequence past max_position_embeddings
  /// (counting `past` cached tokens) are errors naming them.
  Tensor embed(const Tensor& input_ids, int64_t past = 0);
  Tensor layers_range(const Tensor& hidden, int64_t begin, int64_t end);
  Slot<Embedding> embed_tokens;
  Slot<ModuleList<UnaryModule>> layers;
  Slot<UnaryModule> norm;
  bool gradient_checkpointing = false;       // attributes (gradient_checkpointing_enable)
  double gradient_checkpointing_ratio = 1.0;
  /// Sequence parallelism's token split (set by a policy): the first layer splits the
  /// tokens, the last gathers them.
  std::shared_ptr<SequenceSplit> sequence_split;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaModel>(c_); }
  LlamaConfig c_;
};

/// LlamaModel and the head; as a pipeline the stages divide the layers (the first runs
/// embed_tokens, the last norm and lm_head), as GPT2LMHeadModel's.
class LlamaForCausalLM : public Module, public PipelineModule, public CausalLM {
 public:
  explicit LlamaForCausalLM(const LlamaConfig& c);
  std::string type_name() const override { return "LlamaForCausalLM"; }
  /// input_ids [B, T] i64 (labels optional, shifted as transformers does) -> logits and loss.
  virtual CausalLMOutput forward(const Tensor& input_ids, const Tensor& labels = Tensor());
  CausalLMOutput operator()(const Tensor& input_ids, const Tensor& labels = Tensor()) {
    return call_forward([&] { return forward(input_ids, labels); });
  }
  Tensor head(const Tensor& hidden);
  const LlamaConfig& config() const { return c_; }

  Tensor forward_cached(const Tensor& input_ids, KVCache& cache) override;
  int64_t max_positions() const override { return c_.max_position_embeddings; }
  int64_t vocab_size() const override { return c_.vocab_size; }
  Tensor token_loss(const Tensor& logits, const Tensor& targets) override { return lm_token_loss(vocab_head(), logits, targets); }
  /// The head when a policy made it vocabulary-parallel, else null.
  const VocabParallelHead* vocab_head();
  Tensor generate(const Tensor& input_ids, const GenerateOptions& o = {});
  void gradient_checkpointing_enable(double ratio = 1.0) override;
  void gradient_checkpointing_disable() { model->gradient_checkpointing = false; }
  bool is_gradient_checkpointing() const { return model->gradient_checkpointing; }

  int64_t num_pipeline_layers() const override { return c_.num_hidden_layers; }
  std::vector<std::string> stage_modules(const StageSpec& s) const override;
  TensorMap stage_forward(const TensorMap& inputs, const StageSpec& s) override;
  /// The token embeddings when the head is tied to them (the last stage holds them too).
  std::vector<std::string> tied_parameters() const override;

  Slot<LlamaModel> model;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<LlamaForCausalLM>(c_); }
  LlamaConfig c_;
};

/// transformers' LLaMA initialization: normal(0, initializer_range) linears and embeddings,
/// unit norms.
void llama_init_weights(Module& m, const LlamaConfig& c);

}  // namespace booster::nn
