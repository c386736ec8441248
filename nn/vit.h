// Vision Transformer with Hugging Face's module structure and parameter names
// (vit.encoder.layer.0.attention.attention.query.weight, ...), so pretrained weights and
// checkpoints load by name. Pre-norm layers, exact GELU, no pooler. Every forward is
// virtual and every child is called through its slot, typed by the interface the parent
// calls, so a policy may replace any module at any depth (a projection, a dropout, a
// self-attention, a whole layer).
#pragma once

#include "nn/batch_split.h"
#include "nn/layers.h"
#include "nn/pipeline.h"
#include "nn/vit_config.h"

namespace booster::nn {

/// Patch projection: [B, C, H, W] -> [B, N, hidden].
class ViTPatchEmbeddings : public UnaryModule {
 public:
  explicit ViTPatchEmbeddings(const ViTConfig& c);
  std::string type_name() const override { return "ViTPatchEmbeddings"; }
  Tensor forward(const Tensor& pixel_values) override;
  Slot<UnaryModule> projection;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTPatchEmbeddings>(c_); }
  ViTConfig c_;
};

/// CLS token + patch embeddings + position embeddings: [B, C, H, W] -> [B, N + 1, hidden].
class ViTEmbeddings : public UnaryModule {
 public:
  explicit ViTEmbeddings(const ViTConfig& c);
  std::string type_name() const override { return "ViTEmbeddings"; }
  Tensor forward(const Tensor& pixel_values) override;
  const ViTConfig& config() const { return c_; }
  TensorSlot cls_token, position_embeddings;
  Slot<UnaryModule> patch_embeddings, dropout;

 protected:
  /// Around existing parameters and children (a subclass replacing the embeddings keeps them).
  ViTEmbeddings(const ViTConfig& c, Tensor cls, Tensor pos, std::shared_ptr<UnaryModule> patch,
                std::shared_ptr<UnaryModule> drop);
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTEmbeddings>(c_); }
  ViTConfig c_;
};

/// Multi-head self-attention with separate query/key/value: [B, T, H] -> [B, T, H'].
/// When query, key and value are stock Linears without hooks, all with a bias or none, they
/// run as one product over their stacked weights (stacked_linear: one product three times
/// as wide, one transposed copy of the input for the weight gradients, and the input's
/// gradient from one product instead of three and two sums); any replaced or hooked
/// projection (a tensor-parallel policy's, ZeRO-3's gathering hooks) runs through its slot.
/// The probabilities' dropout is the `dropout` slot: the fused attention kernel applies
/// the stock Dropout itself; any other module there runs on the probabilities as HF's
/// eager attention does.
class ViTSelfAttention : public UnaryModule {
 public:
  explicit ViTSelfAttention(const ViTConfig& c);
  std::string type_name() const override { return "ViTSelfAttention"; }
  Tensor forward(const Tensor& hidden) override;
  Slot<UnaryModule> query, key, value, dropout;
  /// HF's attributes (a tensor-parallel policy sets the heads and all_head_size per rank).
  int64_t num_attention_heads, attention_head_size, all_head_size;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTSelfAttention>(c_); }
  /// Around another's projections and dropout (adopted, not copied) and its per-rank heads:
  /// a subclass replacing the attention builds no weights of its own.
  struct Adopt {};
  ViTSelfAttention(const ViTSelfAttention& native, Adopt);
  /// q, k and v from one stacked_linear when the three projections allow it, else empty.
  std::vector<Tensor> stacked_projections(const Tensor& hidden);
  /// q, k and v: [B, T, H] each (stacked where allowed, else through the slots).
  std::vector<Tensor> projections(const Tensor& hidden);
  /// q, k, v: [B, h, T, d] -> the context [B, h, T, d] (the fused kernel with the stock
  /// Dropout, HF's eager attention with any other dropout module).
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v);
  ViTConfig c_;

 private:
  void init(std::shared_ptr<UnaryModule> q, std::shared_ptr<UnaryModule> k, std::shared_ptr<UnaryModule> v,
            std::shared_ptr<UnaryModule> drop);
};

/// Attention output projection: dense + dropout.
class ViTSelfOutput : public UnaryModule {
 public:
  explicit ViTSelfOutput(const ViTConfig& c);
  std::string type_name() const override { return "ViTSelfOutput"; }
  Tensor forward(const Tensor& hidden) override { return dropout(dense(hidden)); }
  Slot<UnaryModule> dense, dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTSelfOutput>(c_); }
  ViTConfig c_;
};

/// ViTSelfAttention followed by ViTSelfOutput.
class ViTAttention : public UnaryModule {
 public:
  explicit ViTAttention(const ViTConfig& c);
  std::string type_name() const override { return "ViTAttention"; }
  Tensor forward(const Tensor& hidden) override { return output(attention(hidden)); }
  Slot<UnaryModule> attention, output;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTAttention>(c_); }
  ViTConfig c_;
};

/// MLP up-projection and activation: [B, T, H] -> [B, T, I].
class ViTIntermediate : public UnaryModule {
 public:
  explicit ViTIntermediate(const ViTConfig& c);
  std::string type_name() const override { return "ViTIntermediate"; }
  Tensor forward(const Tensor& hidden) override { return intermediate_act_fn(dense(hidden)); }
  Slot<UnaryModule> dense, intermediate_act_fn;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTIntermediate>(c_); }
  ViTConfig c_;
};

/// MLP down-projection, dropout and the residual: [B, T, I], [B, T, H] -> [B, T, H].
class ViTOutput : public Module {
 public:
  explicit ViTOutput(const ViTConfig& c);
  std::string type_name() const override { return "ViTOutput"; }
  virtual Tensor forward(const Tensor& hidden, const Tensor& residual) { return add(dropout(dense(hidden)), residual); }
  Slot<UnaryModule> dense, dropout;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTOutput>(c_); }
  ViTConfig c_;
};

/// One pre-norm transformer block.
class ViTLayer : public UnaryModule {
 public:
  explicit ViTLayer(const ViTConfig& c);
  std::string type_name() const override { return "ViTLayer"; }
  Tensor forward(const Tensor& hidden) override;
  Slot<UnaryModule> attention, intermediate;
  Slot<ViTOutput> output;
  Slot<UnaryModule> layernorm_before, layernorm_after;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTLayer>(c_); }
  ViTConfig c_;
};

/// The stack of layers.
class ViTEncoder : public UnaryModule {
 public:
  explicit ViTEncoder(const ViTConfig& c);
  std::string type_name() const override { return "ViTEncoder"; }
  Tensor forward(const Tensor& hidden) override;
  /// Runs layers [begin, end) (a pipeline stage's share); while training with
  /// gradient_checkpointing, the first floor(ratio * (end - begin)) of them checkpointed
  /// (nn::checkpoint), as shardformer's GradientCheckpointConfig does per pipeline stage.
  Tensor forward_layers(const Tensor& hidden, int64_t begin, int64_t end);
  Slot<ModuleList<UnaryModule>> layer;
  /// Hugging Face's ViTEncoder.gradient_checkpointing (attributes of the same names).
  bool gradient_checkpointing = false;
  /// Shardformer's gradient_checkpointing_ratio: the share of each stage's layers checkpointed.
  double gradient_checkpointing_ratio = 1.0;

 protected:
  /// An encoder around existing layers (a subclass replacing the encoder keeps them).
  ViTEncoder(const ViTConfig& c, std::shared_ptr<ModuleList<UnaryModule>> layers);
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTEncoder>(c_); }
  ViTConfig c_;
};

/// Embeddings, encoder and the final layer norm (no pooler): -> [B, N + 1, hidden].
class ViTModel : public UnaryModule {
 public:
  explicit ViTModel(const ViTConfig& c);
  std::string type_name() const override { return "ViTModel"; }
  Tensor forward(const Tensor& pixel_values) override;
  Slot<UnaryModule> embeddings;
  Slot<ViTEncoder> encoder;
  Slot<UnaryModule> layernorm;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<ViTModel>(c_); }
  ViTConfig c_;
};

/// Output of ViTForImageClassification.
struct ImageClassifierOutput {
  Tensor logits;  // [B, num_labels]
  Tensor loss;    // [] mean cross entropy; undefined without labels
};
/// Module hooks see the output's tensors through this.
inline void visit_tensors(ImageClassifierOutput& o, const std::function<void(Tensor&)>& f) {
  if (o.logits.defined()) f(o.logits);
  if (o.loss.defined()) f(o.loss);
}

/// Over batch shares (nn::split_batch): the logits' rows joined, the loss a mean over the
/// batch (each share's weighted by its rows).
inline std::vector<BatchMerge> batch_merge(const ImageClassifierOutput& o) { return logits_loss_merge(o.logits, o.loss); }

/// ViTModel and a linear classifier on the CLS token. As a pipeline: the stages divide the
/// encoder layers; the first also runs the embeddings (reading "pixel_values"), the last
/// the final layer norm and the classifier (returning "logits").
class ViTForImageClassification : public Module, public PipelineModule {
 public:
  explicit ViTForImageClassification(const ViTConfig& c);
  std::string type_name() const override { return "ViTForImageClassification"; }
  /// pixel_values [B, C, H, W] (labels [B] i64 optional) -> logits and loss.
  virtual ImageClassifierOutput forward(const Tensor& pixel_values, const Tensor& labels = Tensor());
  /// forward with this module's hooks.
  ImageClassifierOutput operator()(const Tensor& pixel_values, const Tensor& labels = Tensor()) {
    return call_forward([&] { return forward(pixel_values, labels); });
  }
  int64_t num_pipeline_layers() const override;
  std::vector<std::string> stage_modules(const StageSpec& s) const override;
  TensorMap stage_forward(const TensorMap& inputs, const StageSpec& s) override;
  const ViTConfig& config() const { return c_; }
  /// Re-initializes the classifier (Hugging Face's init) for num_labels classes.
  void reset_classifier(int64_t num_labels);
  /// Hugging Face's gradient_checkpointing_enable(): the encoder's layers run checkpointed
  /// while training (ratio: the share of each stage's layers, the first ones).
  void gradient_checkpointing_enable(double ratio = 1.0);
  void gradient_checkpointing_disable();
  bool is_gradient_checkpointing() const;
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
