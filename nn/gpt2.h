// GPT-2 with Hugging Face's module structure, type names and parameter names
// (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), so its checkpoints read
// as transformers' do: pre-norm blocks, learned positions, GELU-tanh, causal attention,
// Conv1D projections stored [in, out], the head tied to the token embeddings (no
// lm_head.weight of its own while tied, as transformers saves it). Every forward is virtual
// and children run through slots, so policies and wrap policies can replace any module.
#pragma once

#include <functional>
#include <vector>

#include "nn/causal_lm.h"
#include "nn/parallel/sequence_split.h"
#include "nn/gpt2_config.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/pipeline.h"

namespace booster::nn {

/// transformers' Conv1D: y = x W + b with weight [in, out] (GPT-2's layout), bias [out].
class Conv1D : public UnaryModule {
 public:
  Conv1D(int64_t nf, int64_t nx, bool bias = true);  // transformers' argument order: out, in
  /// A Conv1D around existing handles (adopted): weight [in, out], bias [out] or undefined.
  Conv1D(Tensor weight, Tensor bias);
  std::string type_name() const override { return "Conv1D"; }
  Tensor forward(const Tensor& x) override;
  TensorSlot weight, bias;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Conv1D>(nf_, nx_, has_bias_); }
  int64_t nf_, nx_;
  bool has_bias_;
};

/// Causal self-attention: c_attn ([E, 3E]: q, k, v), heads, causal_attention, c_proj.
class GPT2Attention : public UnaryModule {
 public:
  explicit GPT2Attention(const GPT2Config& c);
  /// A GPT2Attention around another's sub-modules and head counts (adopted: a replacement
  /// that only changes how it attends, e.g. Ulysses').
  struct Adopt {};
  GPT2Attention(const GPT2Attention& native, Adopt);
  std::string type_name() const override { return "GPT2Attention"; }
  Tensor forward(const Tensor& hidden) override;  // [B, T, E] -> [B, T, E]
  /// The new tokens' hidden states after the cached ones; keys and values grow by them.
  Tensor forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values);
  Slot<UnaryModule> c_attn, c_proj, attn_dropout, resid_dropout;
  int64_t num_heads, head_dim;  // attributes a tensor-parallel policy divides

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GPT2Attention>(c_); }
  Tensor attend(const Tensor& hidden, Tensor* keys, Tensor* values);  // keys: the cached path
  /// Attention dropout at the attn_dropout module's probability (the composite path), 0 in eval.
  double attention_dropout_p() const;
  GPT2Config c_;
};

/// c_fc, GELU-tanh, c_proj, dropout.
class GPT2MLP : public UnaryModule {
 public:
  explicit GPT2MLP(const GPT2Config& c);
  std::string type_name() const override { return "GPT2MLP"; }
  Tensor forward(const Tensor& hidden) override { return dropout(c_proj(act(c_fc(hidden)))); }
  Slot<UnaryModule> c_fc, act, c_proj, dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GPT2MLP>(c_); }
  GPT2Config c_;
};

/// One pre-norm block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class GPT2Block : public UnaryModule {
 public:
  explicit GPT2Block(const GPT2Config& c);
  std::string type_name() const override { return "GPT2Block"; }
  Tensor forward(const Tensor& hidden) override;
  Tensor forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values);
  Slot<UnaryModule> ln_1, attn, ln_2, mlp;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GPT2Block>(c_); }
  GPT2Config c_;
};

/// Embeddings (wte, wpe, drop), the blocks h.0 ... and ln_f: input_ids [B, T] -> [B, T, E].
class GPT2Model : public UnaryModule {
 public:
  explicit GPT2Model(const GPT2Config& c);
  std::string type_name() const override { return "GPT2Model"; }
  Tensor forward(const Tensor& input_ids) override { return ln_f(blocks(embed(input_ids), 0, int64_t(h->size()))); }
  /// Token plus position embeddings (positions from `past`) and dropout; ids past the
  /// vocabulary or a sequence past n_positions are errors naming them.
  Tensor embed(const Tensor& input_ids, int64_t past = 0);
  /// Blocks [begin, end) (a pipeline stage's share).
  Tensor blocks(const Tensor& hidden, int64_t begin, int64_t end);
  Slot<Embedding> wte, wpe;
  Slot<UnaryModule> drop;
  Slot<ModuleList<UnaryModule>> h;
  Slot<UnaryModule> ln_f;
  bool gradient_checkpointing = false;       // attributes (gradient_checkpointing_enable)
  double gradient_checkpointing_ratio = 1.0;
  /// Sequence parallelism's token split (set by a policy): the first layer splits the
  /// tokens, the last gathers them.
  std::shared_ptr<SequenceSplit> sequence_split;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GPT2Model>(c_); }
  GPT2Config c_;
};

/// GPT2Model and the language-model head. As a pipeline the stages divide the blocks: the
/// first runs the embeddings (reading "input_ids"), the last ln_f and the head (returning
/// "logits"); a head tied to the embeddings keeps a copy of wte on the last stage, its
/// gradient summed with the first stage's after each step (tied_parameters).
class GPT2LMHeadModel : public Module, public PipelineModule, public CausalLM {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& c);
  std::string type_name() const override { return "GPT2LMHeadModel"; }
  /// input_ids [B, T] i64 (labels [B, T] optional, transformers' way: the model shifts them,
  /// position t predicting labels[t + 1]; -100 is ignored) -> logits and loss.
  virtual CausalLMOutput forward(const Tensor& input_ids, const Tensor& labels = Tensor());
  CausalLMOutput operator()(const Tensor& input_ids, const Tensor& labels = Tensor()) {
    return call_forward([&] { return forward(input_ids, labels); });
  }
  /// hidden [B, T, E] -> logits [B, T, V] (the tied embedding matrix, or lm_head).
  Tensor head(const Tensor& hidden);
  const GPT2Config& config() const { return c_; }

  /// Logits of input_ids after the cache's tokens (every block a GPT2Block; see causal_lm.h).
  Tensor forward_cached(const Tensor& input_ids, KVCache& cache) override;
  int64_t max_positions() const override { return c_.n_positions; }
  int64_t vocab_size() const override { return c_.vocab_size; }
  Tensor token_loss(const Tensor& logits, const Tensor& targets) override { return lm_token_loss(vocab_head(), logits, targets); }
  /// The head when a policy made it vocabulary-parallel, else null.
  const VocabParallelHead* vocab_head();
  /// nn::generate in eval mode (the mode is restored).
  Tensor generate(const Tensor& input_ids, const GenerateOptions& o = {});
  void gradient_checkpointing_enable(double ratio = 1.0) override;
  void gradient_checkpointing_disable() { transformer->gradient_checkpointing = false; }
  bool is_gradient_checkpointing() const { return transformer->gradient_checkpointing; }

  int64_t num_pipeline_layers() const override { return c_.n_layer; }
  std::vector<std::string> stage_modules(const StageSpec& s) const override;
  TensorMap stage_forward(const TensorMap& inputs, const StageSpec& s) override;
  /// The token embeddings when the head is tied to them (the last stage holds them too).
  std::vector<std::string> tied_parameters() const override;

  Slot<GPT2Model> transformer;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GPT2LMHeadModel>(c_); }
  GPT2Config c_;
};

/// transformers' GPT-2 initialization: normal(0, initializer_range) weights, zero biases,
/// unit layer norms, and c_proj weights scaled by 1 / sqrt(2 n_layer).
void gpt2_init_weights(Module& m, const GPT2Config& c);

}  // namespace booster::nn
