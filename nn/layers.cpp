// Basic layers: construction, PyTorch-default initialization, forward.
#include "nn/layers.h"

#include "nn/init.h"
#include "nn/linear_cross_entropy.h"

namespace booster::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, DType dtype)
    : in_(in_features), out_(out_features), has_bias_(bias), dtype_(dtype) {
  BOOSTER_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got ", in_features, " -> ",
                out_features);
  Tensor w = Tensor::empty({out_features, in_features}, dtype);
  Tensor b = bias ? Tensor::empty({out_features}, dtype) : Tensor();
  init::default_layer_init_(w, bias ? &b : nullptr, in_features);
  weight = register_parameter("weight", w);
  this->bias = register_parameter("bias", b);
}

Linear::Linear(Tensor w, Tensor b)
    : in_(w.defined() && w.dim() == 2 ? w.size(1) : 0), out_(w.defined() && w.dim() == 2 ? w.size(0) : 0),
      has_bias_(b.defined()), dtype_(w.defined() ? w.dtype() : DType::f32) {
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 2, "Linear(weight, bias): weight must be [out, in], got ",
                  w.defined() ? shape_str(w.shape()) : "undefined");
  BOOSTER_CHECK_T(ShapeError, !b.defined() || b.shape() == Shape{out_}, "Linear(weight, bias): bias ",
                  b.defined() ? shape_str(b.shape()) : "", " does not match ", out_, " outputs");
  weight = register_parameter("weight", w, w.requires_grad());
  bias = register_parameter("bias", b, b.defined() && b.requires_grad());
}

std::shared_ptr<Module> Linear::fresh() const {
  auto l = std::make_shared<Linear>(in_, out_, has_bias_, dtype_);
  l->set_op_label(label_);
  return l;
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) : v_(num_embeddings), d_(embedding_dim) {
  BOOSTER_CHECK(v_ > 0 && d_ > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", v_, " x ", d_);
  Tensor w = Tensor::empty({v_, d_});
  init::normal_(w, 0.0, 1.0);
  weight = register_parameter("weight", w);
}

Embedding::Embedding(Tensor w) : v_(w.defined() && w.dim() == 2 ? w.size(0) : 0), d_(w.defined() && w.dim() == 2 ? w.size(1) : 0) {
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 2, "Embedding(weight): weight must be [num_embeddings, embedding_dim], got ",
                  w.defined() ? shape_str(w.shape()) : "undefined");
  weight = register_parameter("weight", w, w.requires_grad());
}

Tensor Embedding::project_loss(const Tensor& hidden, const Tensor& targets) {
  return linear_cross_entropy(hidden, weight, targets);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::pair<int64_t, int64_t> kernel_size,
               std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding, bool bias)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), stride_(stride), padding_(padding), has_bias_(bias) {
  Tensor w = Tensor::empty({out_channels, in_channels, kernel_size.first, kernel_size.second});
  Tensor b = bias ? Tensor::empty({out_channels}) : Tensor();
  init::default_layer_init_(w, bias ? &b : nullptr, in_channels * kernel_size.first * kernel_size.second);
  weight = register_parameter("weight", w);
  this->bias = register_parameter("bias", b);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias.defined() ? bias.get() : Tensor(), stride_, padding_);
}

std::shared_ptr<Module> Conv2d::fresh() const {
  return std::make_shared<Conv2d>(in_, out_, kernel_, stride_, padding_, has_bias_);
}

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine, bool bias)
    : n_(normalized_shape), eps_(eps), affine_(elementwise_affine), has_bias_(bias) {
  weight = register_parameter("weight", elementwise_affine ? Tensor::ones({normalized_shape}) : Tensor());
  this->bias = register_parameter("bias", elementwise_affine && bias ? Tensor::zeros({normalized_shape}) : Tensor());
}

LayerNorm::LayerNorm(Tensor w, Tensor b, double eps)
    : n_(w.defined() ? w.numel() : 0), eps_(eps), affine_(w.defined()), has_bias_(b.defined()) {
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 1 && (!b.defined() || b.shape() == w.shape()),
                  "LayerNorm(weight, bias): needs a weight [n] and a bias of its shape or none, got ",
                  w.defined() ? shape_str(w.shape()) : "undefined", " and ", b.defined() ? shape_str(b.shape()) : "undefined");
  weight = register_parameter("weight", w, w.requires_grad());
  bias = register_parameter("bias", b, b.defined() && b.requires_grad());
}

Tensor LayerNorm::normalize(const Tensor& x, const Tensor& w, const Tensor& b) const {
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == n_, "LayerNorm(", n_, "): input ", shape_str(x.shape()),
                  " does not end in ", n_);
  if (affine_ && !has_bias_) return mul(layer_norm(x, Tensor(), Tensor(), eps_), w);
  return layer_norm(x, affine_ ? w : Tensor(), affine_ ? b : Tensor(), eps_);
}

std::shared_ptr<Module> LayerNorm::fresh() const { return std::make_shared<LayerNorm>(n_, eps_, affine_, has_bias_); }

Dropout::Dropout(double p) : p_(p) { BOOSTER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  BOOSTER_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"",
                approximate_, "\"");
}

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> layers, SequentialKeys keys) : keys_(std::move(keys)) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  slots_.push_back(register_module(std::to_string(slots_.size()), std::move(m)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& s : slots_) h = s(h);
  return h;
}

std::vector<std::string> Sequential::stage_modules(const StageSpec& s) const {
  std::vector<std::string> out;
  for (int64_t i = s.layer_begin; i < s.layer_end; ++i) out.push_back(std::to_string(i));
  return out;
}

TensorMap Sequential::stage_forward(const TensorMap& inputs, const StageSpec& s) {
  BOOSTER_CHECK(0 <= s.layer_begin && s.layer_begin <= s.layer_end && s.layer_end <= num_pipeline_layers(),
                "Sequential stage: layers [", s.layer_begin, ", ", s.layer_end, ") of ", num_pipeline_layers());
  Tensor h = need(inputs, s.first ? keys_.input : "hidden_states", "Sequential stage");
  for (int64_t i = s.layer_begin; i < s.layer_end; ++i) h = slots_[size_t(i)](h);
  return {{s.last ? keys_.output : "hidden_states", h}};
}

std::shared_ptr<Module> Sequential::fresh() const {
  auto m = std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{}, keys_);
  for (auto& s : slots_) m->push_back(s.typed());
  return m;
}

}  // namespace booster::nn
