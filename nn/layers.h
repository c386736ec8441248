// Basic layers with PyTorch's names, options and parameter names.
#pragma once

#include <string>

#include "core/kernels/ops.h"
#include "nn/module.h"
#include "nn/pipeline.h"

namespace booster::nn {

/// y = x W^T + b; weight [out, in], bias [out].
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  /// A Linear around existing parameter handles (the same tensors, not copies): weight
  /// [out, in], bias [out] or undefined. Replacement layers adopt a model's parameters
  /// this way, so an optimizer built before the replacement still updates them.
  Linear(Tensor weight, Tensor bias);
  std::string type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override { return linear(x, weight, bias.defined() ? bias.get() : Tensor(), label_); }
  /// Names this layer's op in the profiler (a string literal: a language model's "lm head").
  void set_op_label(const char* label) { label_ = label; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  TensorSlot weight, bias;

 protected:
  std::shared_ptr<Module> fresh() const override;
  int64_t in_, out_;
  bool has_bias_;
  DType dtype_;
  const char* label_ = "linear";
};

/// A lookup table (torch.nn.Embedding): ids [...] i64 -> [..., embedding_dim]; weight
/// [num_embeddings, embedding_dim], initialized N(0, 1) as PyTorch's.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  /// An Embedding around an existing table handle [num_embeddings, embedding_dim] (adopted,
  /// as Linear(weight, bias)).
  explicit Embedding(Tensor weight);
  std::string type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& ids) override { return embedding(weight, ids); }
  /// A head tied to this table: hidden [..., embedding_dim] -> logits [..., num_embeddings]
  /// (a vocabulary-parallel table gives its rows' logits).
  virtual Tensor project(const Tensor& hidden) { return linear(hidden, weight, Tensor(), "lm head"); }
  /// The tied head's mean loss on hidden [N, embedding_dim] against targets [N] without whole
  /// logits (linear_cross_entropy; a vocabulary-parallel table over its rows).
  virtual Tensor project_loss(const Tensor& hidden, const Tensor& targets);
  int64_t num_embeddings() const { return v_; }
  int64_t embedding_dim() const { return d_; }
  TensorSlot weight;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Embedding>(v_, d_); }
  int64_t v_, d_;
};

/// 2-D convolution; weight [out, in, kh, kw], bias [out].
class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::pair<int64_t, int64_t> kernel_size,
         std::pair<int64_t, int64_t> stride = {1, 1}, std::pair<int64_t, int64_t> padding = {0, 0}, bool bias = true);
  std::string type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& x) override;
  std::pair<int64_t, int64_t> stride() const { return stride_; }
  std::pair<int64_t, int64_t> padding() const { return padding_; }
  TensorSlot weight, bias;

 protected:
  std::shared_ptr<Module> fresh() const override;
  int64_t in_, out_;
  std::pair<int64_t, int64_t> kernel_, stride_, padding_;
  bool has_bias_;
};

/// Layer norm over the last dim; weight (ones) and bias (zeros) [normalized_shape]; with
/// bias = false (PyTorch's LayerNorm(bias=False), nanoGPT's) the weight only.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  /// A LayerNorm around existing weight and bias handles ([n] each; no bias: LayerNorm(bias = false)).
  LayerNorm(Tensor weight, Tensor bias, double eps);
  std::string type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override { return normalize(x, weight, bias); }
  double eps() const { return eps_; }
  TensorSlot weight, bias;

 protected:
  /// x normalized over its last dim with weight w and bias b (the affine tensors as given).
  Tensor normalize(const Tensor& x, const Tensor& w, const Tensor& b) const;
  std::shared_ptr<Module> fresh() const override;
  int64_t n_;
  double eps_;
  bool affine_, has_bias_ = true;
};

/// Dropout with probability p in training mode; identity in eval mode.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  double p() const { return p_; }

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Dropout>(p_); }
  double p_;
};

/// GELU; approximate "none" (erf) or "tanh".
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<GELU>(approximate_); }
  std::string approximate_;
};

/// Returns its input.
class Identity : public UnaryModule {
 public:
  std::string type_name() const override { return "Identity"; }
  Tensor forward(const Tensor& x) override { return x; }

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Identity>(); }
};

/// The batch key a Sequential reads and the output key it returns when run on named tensors.
struct SequentialKeys {
  std::string input = "input";    // e.g. "input_ids", "pixel_values"
  std::string output = "output";  // e.g. "logits", which the loop's criterion reads by default
};

/// Unary modules applied in order; children are named "0", "1", ... As a pipeline its
/// children are the layers: the first stage reads keys.input, the last returns keys.output.
class Sequential : public UnaryModule, public PipelineModule {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> layers, SequentialKeys keys = {});
  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& x) override;
  int64_t num_pipeline_layers() const override { return int64_t(slots_.size()); }
  std::vector<std::string> stage_modules(const StageSpec& s) const override;
  TensorMap stage_forward(const TensorMap& inputs, const StageSpec& s) override;
  /// Appends a layer.
  void push_back(std::shared_ptr<UnaryModule> m);
  size_t size() const { return slots_.size(); }
  UnaryModule& operator[](size_t i) const { return *slots_.at(i); }
  const SequentialKeys& keys() const { return keys_; }

 protected:
  std::shared_ptr<Module> fresh() const override;
  std::vector<Slot<UnaryModule>> slots_;
  SequentialKeys keys_;
};

/// A list of modules of one kind T; children are named "0", "1", ...
template <typename T>
class ModuleList : public Module {
 public:
  ModuleList() = default;
  std::string type_name() const override { return "ModuleList"; }
  /// Appends a module.
  void push_back(std::shared_ptr<T> m) { slots_.push_back(register_module(std::to_string(slots_.size()), std::move(m))); }
  size_t size() const { return slots_.size(); }
  T& operator[](size_t i) const { return *slots_.at(i); }
  /// The slot of module i (calling it runs the module with its hooks).
  const Slot<T>& at(size_t i) const { return slots_.at(i); }
  auto begin() const { return slots_.begin(); }
  auto end() const { return slots_.end(); }

 protected:
  std::shared_ptr<Module> fresh() const override {
    auto m = std::make_shared<ModuleList<T>>();
    for (size_t i = 0; i < slots_.size(); ++i) m->push_back(std::static_pointer_cast<T>(slots_[i].shared()));
    return m;  // children are replaced by clones in Module::clone
  }
  std::vector<Slot<T>> slots_;
};

}  // namespace booster::nn
