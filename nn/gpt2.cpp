// GPT-2 (see gpt2.h).
#include "nn/gpt2.h"

#include <cmath>

#include "nn/activation_checkpoint.h"
#include "nn/init.h"

namespace booster::nn {

Conv1D::Conv1D(int64_t nf, int64_t nx, bool bias) : nf_(nf), nx_(nx), has_bias_(bias) {
  BOOSTER_CHECK(nf > 0 && nx > 0, "Conv1D: features must be positive, got ", nx, " -> ", nf);
  Tensor w = Tensor::empty({nx, nf});
  Tensor b = bias ? Tensor::zeros({nf}) : Tensor();
  init::normal_(w, 0.0, 0.02);
  weight = register_parameter("weight", w);
  this->bias = register_parameter("bias", b);
}

Conv1D::Conv1D(Tensor w, Tensor b)
    : nf_(w.defined() && w.dim() == 2 ? w.size(1) : 0), nx_(w.defined() && w.dim() == 2 ? w.size(0) : 0), has_bias_(b.defined()) {
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 2, "Conv1D(weight, bias): weight must be [in, out], got ",
                  w.defined() ? shape_str(w.shape()) : "undefined");
  BOOSTER_CHECK_T(ShapeError, !b.defined() || b.shape() == Shape{nf_}, "Conv1D(weight, bias): bias ",
                  b.defined() ? shape_str(b.shape()) : "", " does not match ", nf_, " outputs");
  weight = register_parameter("weight", w, w.requires_grad());
  bias = register_parameter("bias", b, b.defined() && b.requires_grad());
}

// x: [..., nx] -> [..., nf]
Tensor Conv1D::forward(const Tensor& x) {
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == nx_, "Conv1D(", nx_, " -> ", nf_, "): input ",
                  shape_str(x.shape()), " does not end in ", nx_);
  Shape out = x.shape();
  out.back() = nf_;
  Tensor y = matmul(x.reshape({-1, nx_}), weight).view(out);
  return bias.defined() ? add(y, bias.get()) : y;
}

GPT2Attention::GPT2Attention(const GPT2Config& c) : num_heads(c.n_head), head_dim(c.n_embd / c.n_head), c_(c) {
  c_attn = register_module<UnaryModule>("c_attn", std::make_shared<Conv1D>(3 * c.n_embd, c.n_embd, c.bias));
  c_proj = register_module<UnaryModule>("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, c.bias));
  attn_dropout = register_module<UnaryModule>("attn_dropout", std::make_shared<Dropout>(c.attn_pdrop));
  resid_dropout = register_module<UnaryModule>("resid_dropout", std::make_shared<Dropout>(c.resid_pdrop));
  register_attribute("num_heads", &num_heads);
  register_attribute("head_dim", &head_dim);
}

GPT2Attention::GPT2Attention(const GPT2Attention& native, Adopt) : num_heads(native.num_heads), head_dim(native.head_dim), c_(native.c_) {
  c_attn = register_module<UnaryModule>("c_attn", native.c_attn.typed());
  c_proj = register_module<UnaryModule>("c_proj", native.c_proj.typed());
  attn_dropout = register_module<UnaryModule>("attn_dropout", native.attn_dropout.typed());
  resid_dropout = register_module<UnaryModule>("resid_dropout", native.resid_dropout.typed());
  register_attribute("num_heads", &num_heads);
  register_attribute("head_dim", &head_dim);
}

double GPT2Attention::attention_dropout_p() const {
  auto* stock = dynamic_cast<Dropout*>(attn_dropout.get());
  return is_training() && stock ? stock->p() : 0.0;
}

Tensor GPT2Attention::forward(const Tensor& hidden) { return attend(hidden, nullptr, nullptr); }

Tensor GPT2Attention::forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values) {
  return call_forward([&] { return attend(hidden, &keys, &values); });
}

Tensor GPT2Attention::attend(const Tensor& hidden, Tensor* keys, Tensor* values) {
  Tensor qkv = c_attn(hidden);  // [B, T, 3 h d] (T: all the tokens where c_attn gathers a sequence shard)
  const int64_t b = qkv.size(0), t = qkv.size(1), h = num_heads, d = head_dim;
  BOOSTER_CHECK_T(ShapeError, qkv.size(-1) == 3 * h * d, "GPT2Attention: c_attn gives ", qkv.size(-1),
                  " features, not 3 x num_heads ", h, " x head_dim ", d,
                  "; a policy that shards c_attn must set num_heads per rank");
  auto heads = [&](int64_t i) { return qkv.narrow(-1, i * h * d, h * d).view({b, t, h, d}).permute({0, 2, 1, 3}); };
  Tensor ctx;
  if (keys) {
    auto [k, v] = extend_cache(*keys, *values, heads(1), heads(2));
    ctx = cached_attention(heads(0), k, v, 1.0 / std::sqrt(double(d)));
  } else {
    ctx = causal_attention(heads(0), heads(1), heads(2), attention_dropout_p());
  }
  return resid_dropout(c_proj(ctx.permute({0, 2, 1, 3}).reshape({b, t, h * d})));  // [B, T, h, d] -> [B, T, E]
}

GPT2MLP::GPT2MLP(const GPT2Config& c) : c_(c) {
  c_fc = register_module<UnaryModule>("c_fc", std::make_shared<Conv1D>(c.inner(), c.n_embd, c.bias));
  act = register_module<UnaryModule>("act", std::make_shared<GELU>(c.activation_function == "gelu" ? "none" : "tanh"));
  c_proj = register_module<UnaryModule>("c_proj", std::make_shared<Conv1D>(c.n_embd, c.inner(), c.bias));
  dropout = register_module<UnaryModule>("dropout", std::make_shared<Dropout>(c.resid_pdrop));
}

GPT2Block::GPT2Block(const GPT2Config& c) : c_(c) {
  ln_1 = register_module<UnaryModule>("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, c.bias));
  attn = register_module<UnaryModule>("attn", std::make_shared<GPT2Attention>(c));
  ln_2 = register_module<UnaryModule>("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, c.bias));
  mlp = register_module<UnaryModule>("mlp", std::make_shared<GPT2MLP>(c));
}

Tensor GPT2Block::forward(const Tensor& hidden) {
  Tensor x = add(hidden, attn(ln_1(hidden)));
  return add(x, mlp(ln_2(x)));
}

Tensor GPT2Block::forward_cached(const Tensor& hidden, Tensor& keys, Tensor& values) {
  return call_forward([&] {
    auto* a = dynamic_cast<GPT2Attention*>(attn.get());
    BOOSTER_CHECK(a, "GPT2Block: generating with a cache needs a GPT2Attention, this block's attn is ", attn->type_name());
    Tensor x = add(hidden, a->forward_cached(ln_1(hidden), keys, values));
    return add(x, mlp(ln_2(x)));
  });
}

GPT2Model::GPT2Model(const GPT2Config& c) : c_(c) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd));
  drop = register_module<UnaryModule>("drop", std::make_shared<Dropout>(c.embd_pdrop));
  auto list = std::make_shared<ModuleList<UnaryModule>>();
  for (int64_t i = 0; i < c.n_layer; ++i) list->push_back(std::make_shared<GPT2Block>(c));
  h = register_module("h", list);
  ln_f = register_module<UnaryModule>("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, c.bias));
  register_attribute("gradient_checkpointing", &gradient_checkpointing);
  register_attribute("gradient_checkpointing_ratio", &gradient_checkpointing_ratio);
}

// input_ids: [B, T] -> [B, T, E]
Tensor GPT2Model::embed(const Tensor& input_ids, int64_t past) {
  BOOSTER_CHECK_T(ShapeError, input_ids.dim() == 2, "GPT2Model: input_ids must be [batch, sequence], got ",
                  shape_str(input_ids.shape()));
  const int64_t t = input_ids.size(1);
  BOOSTER_CHECK_T(ShapeError, past + t <= c_.n_positions, "GPT2Model: a sequence of ", past + t,
                  " tokens is past n_positions ", c_.n_positions);
  std::vector<int64_t> positions(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) positions[size_t(i)] = past + i;
  Tensor pos = Tensor::from_ints(positions, {1, t});
  return drop(add(wte(input_ids), wpe(pos)));
}

Tensor GPT2Model::blocks(const Tensor& hidden, int64_t begin, int64_t end) {
  const bool split = splits_tokens(sequence_split);
  Tensor x = split && begin == 0 ? sequence_split->split_tokens(hidden, "GPT2Model") : hidden;
  x = run_layers(*h, x, begin, end, gradient_checkpointing, gradient_checkpointing_ratio, is_training(), "GPT2Model");
  return split && end == int64_t(h->size()) ? sequence_split->gather_tokens(x) : x;
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c) : c_(c) {
  c.validate();
  transformer = register_module("transformer", std::make_shared<GPT2Model>(c));
  if (!c.tie_word_embeddings) {
    auto lm_head = std::make_shared<Linear>(c.n_embd, c.vocab_size, false);
    lm_head->set_op_label("lm head");
    register_module<UnaryModule>("lm_head", lm_head);
  }
  gpt2_init_weights(*this, c);
}

Tensor GPT2LMHeadModel::head(const Tensor& hidden) {
  return lm_head_logits(*this, *transformer->wte, c_.tie_word_embeddings, hidden);
}

CausalLMOutput GPT2LMHeadModel::forward(const Tensor& input_ids, const Tensor& labels) {
  CausalLMOutput out{head(transformer(input_ids)), Tensor()};
  if (labels.defined()) causal_lm_loss(out, vocab_head(), labels, input_ids, "GPT2LMHeadModel");
  return out;
}

const VocabParallelHead* GPT2LMHeadModel::vocab_head() { return vocab_parallel_head(*this, *transformer->wte, c_.tie_word_embeddings); }

Tensor GPT2LMHeadModel::forward_cached(const Tensor& input_ids, KVCache& cache) {
  GPT2Model& m = *transformer;
  SequenceSplitOff whole(m.sequence_split);  // one token at a time: the layers run on whole sequences
  return whole_logits(vocab_head(), head(m.ln_f(forward_layers_cached<GPT2Block>(*m.h, m.embed(input_ids, cache.length()), cache, "transformer.h"))));
}

void GPT2LMHeadModel::gradient_checkpointing_enable(double ratio) {
  BOOSTER_CHECK(ratio >= 0 && ratio <= 1, "gradient_checkpointing_enable: ratio must be in [0, 1], got ", ratio);
  transformer->gradient_checkpointing = true;
  transformer->gradient_checkpointing_ratio = ratio;
}

Tensor GPT2LMHeadModel::generate(const Tensor& input_ids, const GenerateOptions& o) {
  return generate_in_eval(*this, *this, input_ids, o);
}

std::vector<std::string> GPT2LMHeadModel::stage_modules(const StageSpec& s) const {
  std::vector<std::string> out;
  if (s.first) out.insert(out.end(), {"transformer.wte", "transformer.wpe", "transformer.drop"});
  for (int64_t i = s.layer_begin; i < s.layer_end; ++i) out.push_back("transformer.h." + std::to_string(i));
  if (s.last) {
    out.push_back("transformer.ln_f");
    if (!c_.tie_word_embeddings) out.push_back("lm_head");
    else if (!s.first) out.push_back("transformer.wte");  // the tied head's weight, kept in step with the first stage's
  }
  return out;
}

std::vector<std::string> GPT2LMHeadModel::tied_parameters() const {
  if (!c_.tie_word_embeddings) return {};
  return {"transformer.wte.weight"};
}

// first: {"input_ids"} -> ...; others: {"hidden_states" [B, T, E]}; last -> {"logits" [B, T, V]} (or {"loss"}: lm_stage_outputs)
TensorMap GPT2LMHeadModel::stage_forward(const TensorMap& inputs, const StageSpec& s) {
  GPT2Model& m = *transformer;
  Tensor x = s.first ? m.embed(need(inputs, "input_ids", "GPT-2 stage")) : need(inputs, "hidden_states", "GPT-2 stage");
  x = m.blocks(x, s.layer_begin, s.layer_end);
  if (!s.last) return {{"hidden_states", x}};
  return lm_stage_outputs(*this, *this, *m.wte, c_.tie_word_embeddings, m.ln_f(x), inputs);
}

void gpt2_init_weights(Module& root, const GPT2Config& c) {
  if (SkipInitGuard::active()) return;
  const double proj_std = c.initializer_range / std::sqrt(2.0 * double(std::max<int64_t>(c.n_layer, 1)));
  for (auto& [name, m] : root.named_modules()) {
    const bool proj = name.size() >= 6 && name.compare(name.size() - 6, 6, "c_proj") == 0;
    const bool dense = dynamic_cast<Conv1D*>(m.get()) || dynamic_cast<Linear*>(m.get()) || dynamic_cast<Embedding*>(m.get());
    for (auto& [pn, p] : m->named_parameters(false)) {
      Tensor t = p;
      if (dense) pn == "weight" ? init::normal_(t, 0.0, proj ? proj_std : c.initializer_range) : init::zeros_(t);
      else if (dynamic_cast<LayerNorm*>(m.get())) pn == "weight" ? init::ones_(t) : init::zeros_(t);
    }
  }
}

}  // namespace booster::nn
