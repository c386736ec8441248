// LLaMA (see llama.h).
#include "nn/llama.h"

#include <cmath>

#include "nn/activation_checkpoint.h"
#include "nn/init.h"

namespace booster::nn {

LlamaRMSNorm::LlamaRMSNorm(int64_t hidden_size, double eps) : n_(hidden_size), eps_(eps) {
  BOOSTER_CHECK(hidden_size > 0, "LlamaRMSNorm: hidden_size must be positive, got ", hidden_size);
  weight = register_parameter("weight", Tensor::ones({hidden_size}));
}

LlamaRMSNorm::LlamaRMSNorm(Tensor w, double eps) : n_(w.defined() ? w.numel() : 0), eps_(eps) {
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 1, "LlamaRMSNorm(weight): weight must be [hidden_size]");
  weight = register_parameter("weight", w, w.requires_grad());
}

Tensor repeat_kv(const Tensor& x, int64_t n_rep, int64_t dim) {
  if (n_rep == 1) return x;
  Shape out = x.shape();
  out[size_t(dim)] *= n_rep;
  const Tensor one = x.unsqueeze(dim + 1);
  return concat(std::vector<Tensor>(size_t(n_rep), one), dim + 1).reshape(out);
}

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : num_heads(c.num_attention_heads), num_key_value_heads(c.kv_heads()), head_dim(c.dim_per_head()), c_(c) {
  const int64_t e = c.hidden_size, d = head_dim;
  q_proj = register_module<UnaryModule>("q_proj", std::make_shared<Linear>(e, num_heads * d, c.attention_bias));
  k_proj = register_module<UnaryModule>("k_proj", std::make_shared<Linear>(e, num_key_value_heads * d, c.attention_bias));
  v_proj = register_module<UnaryModule>("v_proj", std::make_shared<Linear>(e, num_key_value_heads * d, c.attention_bias));
  o_proj = register_module<UnaryModule>("o_proj", std::make_shared<Linear>(num_heads * d, e, c.attention_bias));
  register_attribute("num_heads", &num_heads);
  register_attribute("num_key_value_heads", &num_key_value_heads);
  register_attribute("head_dim", &head_dim);
}

LlamaAttention::LlamaAttention(const LlamaAttention& native, Adopt)
    : num_heads(native.num_heads), num_key_value_heads(native.num_key_value_heads), head_dim(native.head_dim), c_(native.c_) {
  q_proj = register_module<UnaryModule>("q_proj", native.q_proj.typed());
  k_proj = register_module<UnaryModule>("k_proj", native.k_proj.typed());
  v_proj = register_module<UnaryModule>("v_proj", native.v_proj.typed());
  o_proj = register_module<UnaryModule>("o_proj", native.o_proj.typed());
  register_attribute("num_heads", &num_heads);
  register_attribute("num_key_value_heads", &num_key_value_heads);
  register_attribute("head_dim", &head_dim);
}

Tensor LlamaAttention::forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values) {
  return call_forward([&] { return attend(hidden, &keys, &values); });
}

Tensor LlamaAttention::attend(const Tensor& hidden, Tensor* keys, Tensor* values) {
  BOOSTER_CHECK_T(ShapeError, hidden.dim() == 3, "LlamaAttention: hidden states must be [B, T, E], got ",
                  shape_str(hidden.shape()));
  const int64_t b = hidden.size(0), h = num_heads, kv = num_key_value_heads, d = head_dim;
  BOOSTER_CHECK(kv > 0 && h % kv == 0, "LlamaAttention: num_heads ", h, " is not a multiple of num_key_value_heads ", kv);
  const int64_t past = keys && keys->defined() ? keys->size(2) : 0;
  auto split = [&](UnaryModule& proj, int64_t heads, const char* name) {
    Tensor y = proj(hidden);  // all the tokens where the projection gathers a sequence shard
    BOOSTER_CHECK_T(ShapeError, y.size(-1) == heads * d, "LlamaAttention: ", name, " gives ", y.size(-1),
                    " features, not ", heads, " heads x head_dim ", d, "; a policy that shards it must set the heads per rank");
    return y.view({b, y.size(1), heads, d});
  };
  Tensor q = rotary_embedding(split(*q_proj, h, "q_proj"), past, c_.rope_theta);
  Tensor k = rotary_embedding(split(*k_proj, kv, "k_proj"), past, c_.rope_theta);
  Tensor v = split(*v_proj, kv, "v_proj");
  const double scale = 1.0 / std::sqrt(double(d));
  Tensor ctx;  // [B, h, T, d]
  if (keys) {
    auto [ka, va] = extend_cache(*keys, *values, k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}));  // [B, kv, L, d]
    ctx = cached_attention(q.permute({0, 2, 1, 3}), repeat_kv(ka, h / kv, 1), repeat_kv(va, h / kv, 1), scale);
  } else {
    const double p = is_training() ? c_.attention_dropout : 0.0;
    ctx = causal_attention(q.permute({0, 2, 1, 3}), repeat_kv(k, h / kv, 2).permute({0, 2, 1, 3}),
                           repeat_kv(v, h / kv, 2).permute({0, 2, 1, 3}), p, scale);
  }
  return o_proj(ctx.permute({0, 2, 1, 3}).reshape({b, q.size(1), h * d}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c) : c_(c) {
  gate_proj = register_module<UnaryModule>("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module<UnaryModule>("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj = register_module<UnaryModule>("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, c.mlp_bias));
  act_fn = register_module<UnaryModule>("act_fn", std::make_shared<SiLU>());
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c) : c_(c) {
  input_layernorm = register_module<UnaryModule>("input_layernorm", std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module<UnaryModule>("self_attn", std::make_shared<LlamaAttention>(c));
  post_attention_layernorm =
      register_module<UnaryModule>("post_attention_layernorm", std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps));
  mlp = register_module<UnaryModule>("mlp", std::make_shared<LlamaMLP>(c));
}

Tensor LlamaDecoderLayer::forward(const Tensor& hidden) {
  Tensor x = add(hidden, self_attn(input_layernorm(hidden)));
  return add(x, mlp(post_attention_layernorm(x)));
}

Tensor LlamaDecoderLayer::forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values) {
  return call_forward([&] {
    auto* a = dynamic_cast<LlamaAttention*>(self_attn.get());
    BOOSTER_CHECK(a, "LlamaDecoderLayer: generating with a cache needs a LlamaAttention, this layer's self_attn is ",
                  self_attn->type_name());
    Tensor x = add(hidden, a->forward_cached(input_layernorm(hidden), keys, values));
    return add(x, mlp(post_attention_layernorm(x)));
  });
}

LlamaModel::LlamaModel(const LlamaConfig& c) : c_(c) {
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size));
  auto list = std::make_shared<ModuleList<UnaryModule>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) list->push_back(std::make_shared<LlamaDecoderLayer>(c));
  layers = register_module("layers", list);
  norm = register_module<UnaryModule>("norm", std::make_shared<LlamaRMSNorm>(c.hidden_size, c.rms_norm_eps));
  register_attribute("gradient_checkpointing", &gradient_checkpointing);
  register_attribute("gradient_checkpointing_ratio", &gradient_checkpointing_ratio);
}

// input_ids: [B, T] -> [B, T, E]
Tensor LlamaModel::embed(const Tensor& input_ids, int64_t past) {
  BOOSTER_CHECK_T(ShapeError, input_ids.dim() == 2, "LlamaModel: input_ids must be [batch, sequence], got ",
                  shape_str(input_ids.shape()));
  BOOSTER_CHECK_T(ShapeError, past + input_ids.size(1) <= c_.max_position_embeddings, "LlamaModel: a sequence of ",
                  past + input_ids.size(1), " tokens is past max_position_embeddings ", c_.max_position_embeddings);
  return embed_tokens(input_ids);
}

Tensor LlamaModel::layers_range(const Tensor& hidden, int64_t begin, int64_t end) {
  const bool split = splits_tokens(sequence_split);
  Tensor x = split && begin == 0 ? sequence_split->split_tokens(hidden, "LlamaModel") : hidden;
  x = run_layers(*layers, x, begin, end, gradient_checkpointing, gradient_checkpointing_ratio, is_training(), "LlamaModel");
  return split && end == int64_t(layers->size()) ? sequence_split->gather_tokens(x) : x;
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c) : c_(c) {
  c.validate();
  model = register_module("model", std::make_shared<LlamaModel>(c));
  if (!c.tie_word_embeddings) {
    auto lm_head = std::make_shared<Linear>(c.hidden_size, c.vocab_size, false);
    lm_head->set_op_label("lm head");
    register_module<UnaryModule>("lm_head", lm_head);
  }
  llama_init_weights(*this, c);
}

Tensor LlamaForCausalLM::head(const Tensor& hidden) {
  return lm_head_logits(*this, *model->embed_tokens, c_.tie_word_embeddings, hidden);
}

CausalLMOutput LlamaForCausalLM::forward(const Tensor& input_ids, const Tensor& labels) {
  CausalLMOutput out{head(model(input_ids)), Tensor()};
  if (labels.defined()) causal_lm_loss(out, vocab_head(), labels, input_ids, "LlamaForCausalLM");
  return out;
}

const VocabParallelHead* LlamaForCausalLM::vocab_head() { return vocab_parallel_head(*this, *model->embed_tokens, c_.tie_word_embeddings); }

Tensor LlamaForCausalLM::forward_cached(const Tensor& input_ids, KVCache& cache) {
  LlamaModel& m = *model;
  SequenceSplitOff whole(m.sequence_split);  // one token at a time: the layers run on whole sequences
  return whole_logits(vocab_head(), head(m.norm(forward_layers_cached<LlamaDecoderLayer>(*m.layers, m.embed(input_ids, cache.length()), cache,
                                                              "model.layers"))));
}

void LlamaForCausalLM::gradient_checkpointing_enable(double ratio) {
  BOOSTER_CHECK(ratio >= 0 && ratio <= 1, "gradient_checkpointing_enable: ratio must be in [0, 1], got ", ratio);
  model->gradient_checkpointing = true;
  model->gradient_checkpointing_ratio = ratio;
}

Tensor LlamaForCausalLM::generate(const Tensor& input_ids, const GenerateOptions& o) {
  return generate_in_eval(*this, *this, input_ids, o);
}

std::vector<std::string> LlamaForCausalLM::stage_modules(const StageSpec& s) const {
  std::vector<std::string> out;
  if (s.first) out.push_back("model.embed_tokens");
  for (int64_t i = s.layer_begin; i < s.layer_end; ++i) out.push_back("model.layers." + std::to_string(i));
  if (s.last) {
    out.push_back("model.norm");
    if (!c_.tie_word_embeddings) out.push_back("lm_head");
    else if (!s.first) out.push_back("model.embed_tokens");  // the tied head's weight, kept in step with the first stage's
  }
  return out;
}

std::vector<std::string> LlamaForCausalLM::tied_parameters() const {
  if (!c_.tie_word_embeddings) return {};
  return {"model.embed_tokens.weight"};
}

// first: {"input_ids"} -> ...; others: {"hidden_states" [B, T, E]}; last -> {"logits" [B, T, V]}
TensorMap LlamaForCausalLM::stage_forward(const TensorMap& inputs, const StageSpec& s) {
  LlamaModel& m = *model;
  Tensor x = s.first ? m.embed(need(inputs, "input_ids", "LLaMA stage")) : need(inputs, "hidden_states", "LLaMA stage");
  x = m.layers_range(x, s.layer_begin, s.layer_end);
  if (!s.last) return {{"hidden_states", x}};
  return lm_stage_outputs(*this, *this, *m.embed_tokens, c_.tie_word_embeddings, m.norm(x), inputs);
}

void llama_init_weights(Module& root, const LlamaConfig& c) {
  if (SkipInitGuard::active()) return;
  for (auto& [name, m] : root.named_modules()) {
    const bool dense = dynamic_cast<Linear*>(m.get()) || dynamic_cast<Embedding*>(m.get());
    for (auto& [pn, p] : m->named_parameters(false)) {
      Tensor t = p;
      if (dense) pn == "weight" ? init::normal_(t, 0.0, c.initializer_range) : init::zeros_(t);
      else if (dynamic_cast<LlamaRMSNorm*>(m.get())) init::ones_(t);
    }
  }
}

}  // namespace booster::nn
