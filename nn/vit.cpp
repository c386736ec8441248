// ViT modules: construction, Hugging Face initialization and forward passes.
#include "nn/vit.h"

#include <cmath>

#include "nn/init.h"

namespace booster::nn {

ViTPatchEmbeddings::ViTPatchEmbeddings(const ViTConfig& c) : c_(c) {
  projection = register_module("projection", std::make_shared<Conv2d>(c.num_channels, c.hidden_size,
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
  return projection->forward(pixel_values).flatten(2).transpose(1, 2);
}

ViTEmbeddings::ViTEmbeddings(const ViTConfig& c) : c_(c) {
  Tensor cls = Tensor::zeros({1, 1, c.hidden_size}), pos = Tensor::zeros({1, c.num_patches() + 1, c.hidden_size});
  init::trunc_normal_(cls, 0.0, c.initializer_range);
  init::trunc_normal_(pos, 0.0, c.initializer_range);
  cls_token = register_parameter("cls_token", cls);
  position_embeddings = register_parameter("position_embeddings", pos);
  patch_embeddings = register_module("patch_embeddings", std::make_shared<ViTPatchEmbeddings>(c));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

// pixel_values: [B, C, H, W] -> [B, N + 1, hidden]
Tensor ViTEmbeddings::forward(const Tensor& pixel_values) {
  Tensor patches = patch_embeddings->forward(pixel_values);  // [B, N, hidden]
  const int64_t b = patches.size(0);
  Tensor cls = cls_token->expand({b, 1, c_.hidden_size});
  Tensor x = concat({cls.to(patches.dtype()), patches}, 1);
  return dropout->forward(add(x, position_embeddings->to(x.dtype())));
}

ViTSelfAttention::ViTSelfAttention(const ViTConfig& c) : num_attention_heads(c.num_attention_heads), c_(c) {
  query = register_module("query", std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias));
  key = register_module("key", std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias));
  value = register_module("value", std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.qkv_bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.attention_probs_dropout_prob));
}

// hidden: [B, T, H] -> [B, T, H'] where H' = heads * head_dim of this module's projections
Tensor ViTSelfAttention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1);
  const int64_t head_dim = c_.hidden_size / c_.num_attention_heads;
  auto heads = [&](const Tensor& x) {  // [B, T, h*d] -> [B, h, T, d]
    return x.view({b, t, x.size(-1) / head_dim, head_dim}).permute({0, 2, 1, 3});
  };
  Tensor q = heads(query->forward(hidden)), k = heads(key->forward(hidden)), v = heads(value->forward(hidden));
  // HF's sdpa attention: dropout on the probabilities only while training.
  Tensor ctx = scaled_dot_product_attention(q, k, v, is_training() ? dropout->p() : 0.0)
                   .permute({0, 2, 1, 3});  // [B, T, h, d], contiguous memory
  return ctx.reshape({b, t, ctx.size(2) * head_dim});
}

ViTSelfOutput::ViTSelfOutput(const ViTConfig& c) : c_(c) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

ViTAttention::ViTAttention(const ViTConfig& c) : c_(c) {
  attention = register_module("attention", std::make_shared<ViTSelfAttention>(c));
  output = register_module("output", std::make_shared<ViTSelfOutput>(c));
}

ViTIntermediate::ViTIntermediate(const ViTConfig& c) : c_(c) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.intermediate_size));
  intermediate_act_fn = register_module<UnaryModule>(
      "intermediate_act_fn", std::make_shared<GELU>(c.hidden_act == "gelu" ? "none" : "tanh"));
}

ViTOutput::ViTOutput(const ViTConfig& c) : c_(c) {
  dense = register_module("dense", std::make_shared<Linear>(c.intermediate_size, c.hidden_size));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

ViTLayer::ViTLayer(const ViTConfig& c) : c_(c) {
  attention = register_module("attention", std::make_shared<ViTAttention>(c));
  intermediate = register_module("intermediate", std::make_shared<ViTIntermediate>(c));
  output = register_module("output", std::make_shared<ViTOutput>(c));
  layernorm_before = register_module("layernorm_before", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  layernorm_after = register_module("layernorm_after", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
}

// hidden: [B, T, H] -> [B, T, H]
Tensor ViTLayer::forward(const Tensor& hidden) {
  Tensor h = add(attention->forward(layernorm_before->forward(hidden)), hidden);
  return output->forward(intermediate->forward(layernorm_after->forward(h)), h);
}

ViTEncoder::ViTEncoder(const ViTConfig& c) : c_(c) {
  auto list = std::make_shared<ModuleList<ViTLayer>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) list->push_back(std::make_shared<ViTLayer>(c));
  layer = register_module("layer", list);
}

Tensor ViTEncoder::forward(const Tensor& hidden) {
  Tensor h = hidden;
  for (auto& l : *layer) h = l->forward(h);
  return h;
}

ViTModel::ViTModel(const ViTConfig& c) : c_(c) {
  embeddings = register_module("embeddings", std::make_shared<ViTEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<ViTEncoder>(c));
  layernorm = register_module("layernorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
}

Tensor ViTModel::forward(const Tensor& pixel_values) {
  return layernorm->forward(encoder->forward(embeddings->forward(pixel_values)));
}

ViTForImageClassification::ViTForImageClassification(const ViTConfig& c) : c_(c) {
  c.validate();
  vit = register_module("vit", std::make_shared<ViTModel>(c));
  classifier = register_module<UnaryModule>("classifier", c.num_labels > 0
                                                              ? std::shared_ptr<UnaryModule>(std::make_shared<Linear>(c.hidden_size, c.num_labels))
                                                              : std::make_shared<Identity>());
  vit_init_weights(*this, c.initializer_range);
}

ImageClassifierOutput ViTForImageClassification::forward(const Tensor& pixel_values, const Tensor& labels) {
  Tensor seq = vit->forward(pixel_values);          // [B, T, H]
  Tensor logits = classifier->forward(seq.select(1, 0));  // CLS token: [B, H] -> [B, L]
  ImageClassifierOutput out{logits, Tensor()};
  if (labels.defined()) out.loss = cross_entropy(logits, labels);
  return out;
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
