// ViT modules: construction, Hugging Face initialization and forward passes.
#include "nn/vit.h"

#include <cmath>
#include <typeinfo>

#include "nn/activation_checkpoint.h"
#include "nn/init.h"

namespace booster::nn {

ViTPatchEmbeddings::ViTPatchEmbeddings(const ViTConfig& c) : c_(c) {
  projection = register_module<UnaryModule>("projection", std::make_shared<Conv2d>(c.num_channels, c.hidden_size,
                                                                        std::pair{c.patch_size, c.patch_size},
                                                                        std::pair{c.patch_size, c.patch_size}));
}

// pixel_values: [B, C, H, W] -> [B, N, hidden]
Tensor ViTPatchEmbeddings::forward(const Tensor& pixel_values) {
  BOOSTER_CHECK_T(ShapeError,
                  pixel_values.dim() == 4 && pixel_values.size(1) == c_.num_channels &&
                      pixel_values.size(2) == c_.image_size && pixel_values.size(3) == c_.image_size,
                  "ViT: pixel_values ", shape_str(pixel_values.shape()), " do not match the model's input [B, ",
                  c_.num_channels, ", ", c_.image_size, ", ", c_.image_size, "]");
  return projection(pixel_values).flatten(2).transpose(1, 2);
}

ViTEmbeddings::ViTEmbeddings(const ViTConfig& c) : c_(c) {
  Tensor cls = Tensor::zeros({1, 1, c.hidden_size}), pos = Tensor::zeros({1, c.num_patches() + 1, c.hidden_size});
  init::trunc_normal_(cls, 0.0, c.initializer_range);
  init::trunc_normal_(pos, 0.0, c.initializer_range);
  cls_token = register_parameter("cls_token", cls);
  position_embeddings = register_parameter("position_embeddings", pos);
  patch_embeddings = register_module<UnaryModule>("patch_embeddings", std::make_shared<ViTPatchEmbeddings>(c));
  dropout = register_module<UnaryModule>("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

ViTEmbeddings::ViTEmbeddings(const ViTConfig& c, Tensor cls, Tensor pos, std::shared_ptr<UnaryModule> patch,
                             std::shared_ptr<UnaryModule> drop)
    : c_(c) {
  cls_token = register_parameter("cls_token", std::move(cls));
  position_embeddings = register_parameter("position_embeddings", std::move(pos));
  patch_embeddings = register_module<UnaryModule>("patch_embeddings", std::move(patch));
  dropout = register_module<UnaryModule>("dropout", std::move(drop));
}

// pixel_values: [B, C, H, W] -> [B, N + 1, hidden]
Tensor ViTEmbeddings::forward(const Tensor& pixel_values) {
  Tensor patches = patch_embeddings(pixel_values);  // [B, N, hidden]
  const int64_t b = patches.size(0);
  Tensor cls = cls_token->expand({b, 1, c_.hidden_size});
  Tensor x = concat({cls.to(patches.dtype()), patches}, 1);
  return dropout(add(x, position_embeddings->to(x.dtype())));
}

ViTSelfAttention::ViTSelfAttention(const ViTConfig& c)
    : num_attention_heads(c.num_attention_heads),
      attention_head_size(c.hidden_size / c.num_attention_heads),
      all_head_size(c.hidden_size),
      c_(c) {
  init(std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias),
       std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias),
       std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias),
       std::make_shared<Dropout>(c.attention_probs_dropout_prob));
}

ViTSelfAttention::ViTSelfAttention(const ViTSelfAttention& native, Adopt)
    : num_attention_heads(native.num_attention_heads),
      attention_head_size(native.attention_head_size),
      all_head_size(native.all_head_size),
      c_(native.c_) {
  init(native.query.typed(), native.key.typed(), native.value.typed(), native.dropout.typed());
}

void ViTSelfAttention::init(std::shared_ptr<UnaryModule> q, std::shared_ptr<UnaryModule> k,
                            std::shared_ptr<UnaryModule> v, std::shared_ptr<UnaryModule> drop) {
  query = register_module<UnaryModule>("query", std::move(q));
  key = register_module<UnaryModule>("key", std::move(k));
  value = register_module<UnaryModule>("value", std::move(v));
  dropout = register_module<UnaryModule>("dropout", std::move(drop));
  register_attribute("num_attention_heads", &num_attention_heads);
  register_attribute("attention_head_size", &attention_head_size);
  register_attribute("all_head_size", &all_head_size);
}

// hidden: [B, T, H] -> [B, T, all_head_size] (heads * head_dim of this rank's projections)
Tensor ViTSelfAttention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), d = attention_head_size, h = num_attention_heads;
  auto heads = [&](const Tensor& x, const char* which) {  // [B, T, h*d] -> [B, h, T, d]
    BOOSTER_CHECK_T(ShapeError, x.size(-1) == h * d && all_head_size == h * d, "ViTSelfAttention: ", which, " gives ",
                    x.size(-1), " features, but num_attention_heads ", h, " x attention_head_size ", d,
                    " (all_head_size ", all_head_size, "); a policy that shards the projections must set the heads "
                    "and all_head_size per rank");
    return x.view({b, t, h, d}).permute({0, 2, 1, 3});
  };
  std::vector<Tensor> qkv = projections(hidden);
  Tensor q = heads(qkv[0], "query"), k = heads(qkv[1], "key"), v = heads(qkv[2], "value");
  Tensor ctx = attend(q, k, v).permute({0, 2, 1, 3});  // [B, T, h, d]
  return ctx.reshape({b, t, all_head_size});
}

std::vector<Tensor> ViTSelfAttention::projections(const Tensor& hidden) {
  std::vector<Tensor> qkv = stacked_projections(hidden);
  if (qkv.empty()) qkv = {query(hidden), key(hidden), value(hidden)};
  return qkv;
}

Tensor ViTSelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v) {
  auto* stock = dynamic_cast<Dropout*>(dropout.get());
  if (stock && typeid(*stock) == typeid(Dropout)) {
    // HF's sdpa attention: the kernel drops probabilities itself, only while training.
    return scaled_dot_product_attention(q, k, v, is_training() ? stock->p() : 0.0);
  }
  // Another module in the dropout slot: HF's eager attention, with the slot on the probabilities.
  Tensor probs = softmax(scale(matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(q.size(-1)))));
  return matmul(dropout(probs), v);
}

std::vector<Tensor> ViTSelfAttention::stacked_projections(const Tensor& hidden) {
  std::vector<Tensor> ws, bs;
  for (UnaryModule* m : {query.get(), key.get(), value.get()}) {
    auto* lin = dynamic_cast<Linear*>(m);
    if (!lin || typeid(*lin) != typeid(Linear) || lin->has_hooks()) return {};
    ws.push_back(lin->weight.get());
    if (lin->bias.defined()) bs.push_back(lin->bias.get());
  }
  if (!bs.empty() && bs.size() != ws.size()) return {};
  return stacked_linear(hidden, ws, bs);
}

ViTSelfOutput::ViTSelfOutput(const ViTConfig& c) : c_(c) {
  dense = register_module<UnaryModule>("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size));
  dropout = register_module<UnaryModule>("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

ViTAttention::ViTAttention(const ViTConfig& c) : c_(c) {
  attention = register_module<UnaryModule>("attention", std::make_shared<ViTSelfAttention>(c));
  output = register_module<UnaryModule>("output", std::make_shared<ViTSelfOutput>(c));
}

ViTIntermediate::ViTIntermediate(const ViTConfig& c) : c_(c) {
  dense = register_module<UnaryModule>("dense", std::make_shared<Linear>(c.hidden_size, c.intermediate_size));
  intermediate_act_fn = register_module<UnaryModule>(
      "intermediate_act_fn", std::make_shared<GELU>(c.hidden_act == "gelu" ? "none" : "tanh"));
}

ViTOutput::ViTOutput(const ViTConfig& c) : c_(c) {
  dense = register_module<UnaryModule>("dense", std::make_shared<Linear>(c.intermediate_size, c.hidden_size));
  dropout = register_module<UnaryModule>("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

ViTLayer::ViTLayer(const ViTConfig& c) : c_(c) {
  attention = register_module<UnaryModule>("attention", std::make_shared<ViTAttention>(c));
  intermediate = register_module<UnaryModule>("intermediate", std::make_shared<ViTIntermediate>(c));
  output = register_module("output", std::make_shared<ViTOutput>(c));
  layernorm_before =
      register_module<UnaryModule>("layernorm_before", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  layernorm_after =
      register_module<UnaryModule>("layernorm_after", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
}

// hidden: [B, T, H] -> [B, T, H]
Tensor ViTLayer::forward(const Tensor& hidden) {
  Tensor h = add(attention(layernorm_before(hidden)), hidden);
  return output(intermediate(layernorm_after(h)), h);
}

ViTEncoder::ViTEncoder(const ViTConfig& c) : c_(c) {
  auto list = std::make_shared<ModuleList<UnaryModule>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) list->push_back(std::make_shared<ViTLayer>(c));
  layer = register_module("layer", list);
  register_attribute("gradient_checkpointing", &gradient_checkpointing);
  register_attribute("gradient_checkpointing_ratio", &gradient_checkpointing_ratio);
}

ViTEncoder::ViTEncoder(const ViTConfig& c, std::shared_ptr<ModuleList<UnaryModule>> layers) : c_(c) {
  layer = register_module("layer", std::move(layers));
  register_attribute("gradient_checkpointing", &gradient_checkpointing);
  register_attribute("gradient_checkpointing_ratio", &gradient_checkpointing_ratio);
}

Tensor ViTEncoder::forward(const Tensor& hidden) { return forward_layers(hidden, 0, int64_t(layer->size())); }

Tensor ViTEncoder::forward_layers(const Tensor& hidden, int64_t begin, int64_t end) {
  return run_layers(*layer, hidden, begin, end, gradient_checkpointing, gradient_checkpointing_ratio, is_training(),
                    "ViTEncoder");
}

ViTModel::ViTModel(const ViTConfig& c) : c_(c) {
  embeddings = register_module<UnaryModule>("embeddings", std::make_shared<ViTEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<ViTEncoder>(c));
  layernorm = register_module<UnaryModule>("layernorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
}

Tensor ViTModel::forward(const Tensor& pixel_values) { return layernorm(encoder(embeddings(pixel_values))); }

ViTForImageClassification::ViTForImageClassification(const ViTConfig& c) : c_(c) {
  c.validate();
  vit = register_module("vit", std::make_shared<ViTModel>(c));
  classifier = register_module<UnaryModule>("classifier", c.num_labels > 0
                                                              ? std::shared_ptr<UnaryModule>(std::make_shared<Linear>(c.hidden_size, c.num_labels))
                                                              : std::make_shared<Identity>());
  vit_init_weights(*this, c.initializer_range);
}

ImageClassifierOutput ViTForImageClassification::forward(const Tensor& pixel_values, const Tensor& labels) {
  Tensor seq = vit(pixel_values);                    // [B, T, H]
  Tensor logits = classifier(seq.select(1, 0));      // CLS token: [B, H] -> [B, L]
  ImageClassifierOutput out{logits, Tensor()};
  if (labels.defined()) out.loss = cross_entropy(logits, labels);
  return out;
}

int64_t ViTForImageClassification::num_pipeline_layers() const { return int64_t(vit->encoder->layer->size()); }

std::vector<std::string> ViTForImageClassification::stage_modules(const StageSpec& s) const {
  std::vector<std::string> out;
  if (s.first) out.push_back("vit.embeddings");
  for (int64_t i = s.layer_begin; i < s.layer_end; ++i) out.push_back("vit.encoder.layer." + std::to_string(i));
  if (s.last) out.insert(out.end(), {"vit.layernorm", "classifier"});
  return out;
}

// first: {"pixel_values"} -> ...; others: {"hidden_states" [B, T, H]}; last -> {"logits" [B, L]}
TensorMap ViTForImageClassification::stage_forward(const TensorMap& inputs, const StageSpec& s) {
  ViTModel& m = *vit;
  Tensor h = s.first ? m.embeddings(need(inputs, "pixel_values", "ViT stage")) : need(inputs, "hidden_states", "ViT stage");
  // The whole encoder runs through its slot, so a replaced encoder (sequence parallelism's
  // split and gather) runs as in forward(); a stage's share of the layers runs them alone.
  const bool whole = s.layer_begin == 0 && s.layer_end == num_pipeline_layers();
  h = whole ? m.encoder(h) : m.encoder->forward_layers(h, s.layer_begin, s.layer_end);
  if (!s.last) return {{"hidden_states", h}};
  return {{"logits", classifier(m.layernorm(h).select(1, 0))}};
}

void ViTForImageClassification::reset_classifier(int64_t num_labels) {
  c_.num_labels = num_labels;
  if (num_labels > 0) {
    auto lin = std::make_shared<Linear>(c_.hidden_size, num_labels);
    vit_init_weights(*lin, c_.initializer_range);
    replace("classifier", lin);
  } else {
    replace("classifier", std::make_shared<Identity>());
  }
}

void ViTForImageClassification::gradient_checkpointing_enable(double ratio) {
  BOOSTER_CHECK(ratio >= 0 && ratio <= 1, "gradient_checkpointing_enable: ratio must be in [0, 1], got ", ratio);
  vit->encoder->gradient_checkpointing = true;
  vit->encoder->gradient_checkpointing_ratio = ratio;
}

void ViTForImageClassification::gradient_checkpointing_disable() { vit->encoder->gradient_checkpointing = false; }

bool ViTForImageClassification::is_gradient_checkpointing() const { return vit->encoder->gradient_checkpointing; }

void vit_init_weights(Module& root, double initializer_range) {
  if (SkipInitGuard::active()) return;
  for (auto& [name, m] : root.named_modules()) {
    if (dynamic_cast<Linear*>(m.get()) || dynamic_cast<Conv2d*>(m.get())) {
      for (auto& [pn, p] : m->named_parameters(false)) {
        Tensor t = p;
        if (pn == "weight") init::trunc_normal_(t, 0.0, initializer_range);
        else init::zeros_(t);
      }
    } else if (dynamic_cast<LayerNorm*>(m.get())) {
      for (auto& [pn, p] : m->named_parameters(false)) {
        Tensor t = p;
        if (pn == "weight") init::ones_(t);
        else init::zeros_(t);
      }
    }
  }
}

}  // namespace booster::nn
