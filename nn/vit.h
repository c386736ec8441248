// Vision Transformer with Hugging Face's module structure and parameter names
// (vit.encoder.layer.0.attention.attention.query.weight, ...), so pretrained weights and
// checkpoints load by name. Pre-norm layers, exact GELU, no pooler.
#pragma once

#include "nn/layers.h"
#include "nn/vit_config.h"

namespace booster::nn {

/// Patch projection: [B, C, H, W] -> [B, N, hidden].
class ViTPatchEmbeddings : public Module {
 public:
  explicit ViTPatchEmbeddings(const ViTConfig& c);
  std::string type_name() const override { return "ViTPatchEmbeddings"; }
  Tensor forward(const Tensor& pixel_values);
  Slot<Conv2d> projection;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTPatchEmbeddings>(c_); }
  ViTConfig c_;
};

/// CLS token + patch embeddings + position embeddings: [B, C, H, W] -> [B, N + 1, hidden].
class ViTEmbeddings : public Module {
 public:
  explicit ViTEmbeddings(const ViTConfig& c);
  std::string type_name() const override { return "ViTEmbeddings"; }
  Tensor forward(const Tensor& pixel_values);
  TensorSlot cls_token, position_embeddings;
  Slot<ViTPatchEmbeddings> patch_embeddings;
  Slot<Dropout> dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTEmbeddings>(c_); }
  ViTConfig c_;
};

/// Multi-head self-attention with separate query/key/value: [B, T, H] -> [B, T, H].
class ViTSelfAttention : public Module {
 public:
  explicit ViTSelfAttention(const ViTConfig& c);
  std::string type_name() const override { return "ViTSelfAttention"; }
  Tensor forward(const Tensor& hidden);
  Slot<Linear> query, key, value;
  Slot<Dropout> dropout;
  /// Heads this module computes (a tensor-parallel policy lowers it per rank).
  int64_t num_attention_heads;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTSelfAttention>(c_); }
  ViTConfig c_;
};

/// Attention output projection: dense + dropout.
class ViTSelfOutput : public Module {
 public:
  explicit ViTSelfOutput(const ViTConfig& c);
  std::string type_name() const override { return "ViTSelfOutput"; }
  Tensor forward(const Tensor& hidden) { return dropout->forward(dense->forward(hidden)); }
  Slot<Linear> dense;
  Slot<Dropout> dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTSelfOutput>(c_); }
  ViTConfig c_;
};

/// ViTSelfAttention followed by ViTSelfOutput.
class ViTAttention : public Module {
 public:
  explicit ViTAttention(const ViTConfig& c);
  std::string type_name() const override { return "ViTAttention"; }
  Tensor forward(const Tensor& hidden) { return output->forward(attention->forward(hidden)); }
  Slot<ViTSelfAttention> attention;
  Slot<ViTSelfOutput> output;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTAttention>(c_); }
  ViTConfig c_;
};

/// MLP up-projection and activation: [B, T, H] -> [B, T, I].
class ViTIntermediate : public Module {
 public:
  explicit ViTIntermediate(const ViTConfig& c);
  std::string type_name() const override { return "ViTIntermediate"; }
  Tensor forward(const Tensor& hidden) { return intermediate_act_fn->forward(dense->forward(hidden)); }
  Slot<Linear> dense;
  Slot<UnaryModule> intermediate_act_fn;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTIntermediate>(c_); }
  ViTConfig c_;
};

/// MLP down-projection, dropout and the residual: [B, T, I], [B, T, H] -> [B, T, H].
class ViTOutput : public Module {
 public:
  explicit ViTOutput(const ViTConfig& c);
  std::string type_name() const override { return "ViTOutput"; }
  Tensor forward(const Tensor& hidden, const Tensor& residual) {
    return add(dropout->forward(dense->forward(hidden)), residual);
  }
  Slot<Linear> dense;
  Slot<Dropout> dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTOutput>(c_); }
  ViTConfig c_;
};

/// One pre-norm transformer block.
class ViTLayer : public Module {
 public:
  explicit ViTLayer(const ViTConfig& c);
  std::string type_name() const override { return "ViTLayer"; }
  Tensor forward(const Tensor& hidden);
  Slot<ViTAttention> attention;
  Slot<ViTIntermediate> intermediate;
  Slot<ViTOutput> output;
  Slot<LayerNorm> layernorm_before, layernorm_after;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTLayer>(c_); }
  ViTConfig c_;
};

/// The stack of layers.
class ViTEncoder : public Module {
 public:
  explicit ViTEncoder(const ViTConfig& c);
  std::string type_name() const override { return "ViTEncoder"; }
  Tensor forward(const Tensor& hidden);
  Slot<ModuleList<ViTLayer>> layer;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTEncoder>(c_); }
  ViTConfig c_;
};

/// Embeddings, encoder and the final layer norm (no pooler): -> [B, N + 1, hidden].
class ViTModel : public Module {
 public:
  explicit ViTModel(const ViTConfig& c);
  std::string type_name() const override { return "ViTModel"; }
  Tensor forward(const Tensor& pixel_values);
  Slot<ViTEmbeddings> embeddings;
  Slot<ViTEncoder> encoder;
  Slot<LayerNorm> layernorm;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTModel>(c_); }
  ViTConfig c_;
};

/// Output of ViTForImageClassification.
struct ImageClassifierOutput {
  Tensor logits;  // [B, num_labels]
  Tensor loss;    // [] mean cross entropy; undefined without labels
};

/// ViTModel and a linear classifier on the CLS token.
class ViTForImageClassification : public Module {
 public:
  explicit ViTForImageClassification(const ViTConfig& c);
  std::string type_name() const override { return "ViTForImageClassification"; }
  /// pixel_values [B, C, H, W] (labels [B] i64 optional) -> logits and loss.
  ImageClassifierOutput forward(const Tensor& pixel_values, const Tensor& labels = Tensor());
  ImageClassifierOutput operator()(const Tensor& pixel_values, const Tensor& labels = Tensor()) {
    return forward(pixel_values, labels);
  }
  const ViTConfig& config() const { return c_; }
  /// Re-initializes the classifier (Hugging Face's init) for num_labels classes.
  void reset_classifier(int64_t num_labels);
  Slot<ViTModel> vit;
  Slot<UnaryModule> classifier;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTForImageClassification>(c_); }
  ViTConfig c_;
};

/// Hugging Face's ViT initialization of every parameter below `m`: Linear/Conv2d weights
/// trunc_normal(0, initializer_range), biases zero, LayerNorm ones/zeros, CLS token and
/// position embeddings trunc_normal(0, initializer_range).
void vit_init_weights(Module& m, double initializer_range);

}  // namespace booster::nn
