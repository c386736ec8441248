// Basic layers: construction, PyTorch-default initialization, forward.
#include "nn/layers.h"

#include "nn/init.h"

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

std::shared_ptr<Module> Linear::fresh() const { return std::make_shared<Linear>(in_, out_, has_bias_, dtype_); }

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

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine)
    : n_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
  weight = register_parameter("weight", elementwise_affine ? Tensor::ones({normalized_shape}) : Tensor());
  bias = register_parameter("bias", elementwise_affine ? Tensor::zeros({normalized_shape}) : Tensor());
}

Tensor LayerNorm::forward(const Tensor& x) {
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == n_, "LayerNorm(", n_, "): input ", shape_str(x.shape()),
                  " does not end in ", n_);
  return layer_norm(x, affine_ ? weight.get() : Tensor(), affine_ ? bias.get() : Tensor(), eps_);
}

std::shared_ptr<Module> LayerNorm::fresh() const { return std::make_shared<LayerNorm>(n_, eps_, affine_); }

Dropout::Dropout(double p) : p_(p) { BOOSTER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  BOOSTER_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"",
                approximate_, "\"");
}

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  slots_.push_back(register_module(std::to_string(slots_.size()), std::move(m)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& s : slots_) h = s->forward(h);
  return h;
}

std::shared_ptr<Module> Sequential::fresh() const {
  auto m = std::make_shared<Sequential>();
  for (auto& s : slots_) m->push_back(std::static_pointer_cast<UnaryModule>(s.shared()));
  return m;
}

}  // namespace booster::nn
