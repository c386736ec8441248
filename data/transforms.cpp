// Augmentations (see transforms.h).
#include "data/transforms.h"

#include <cmath>

namespace booster::data {

std::array<int64_t, 4> RandomResizedCrop::get_params(const Image& img, Generator& g) const {
  const double h = double(img.height), w = double(img.width), area = h * w;
  const double log_r0 = std::log(ratio.first), log_r1 = std::log(ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scale.first + (scale.second - scale.first) * g.next_double());
    const double ar = std::exp(log_r0 + (log_r1 - log_r0) * g.next_double());
    const int64_t cw = int64_t(std::lround(std::sqrt(target * ar)));
    const int64_t ch = int64_t(std::lround(std::sqrt(target / ar)));
    if (cw > 0 && cw <= img.width && ch > 0 && ch <= img.height) {
      const int64_t top = int64_t(g.next_u64() % uint64_t(img.height - ch + 1));
      const int64_t left = int64_t(g.next_u64() % uint64_t(img.width - cw + 1));
      return {top, left, ch, cw};
    }
  }
  // Fallback: a central crop with the ratio clamped into range.
  const double in_ratio = w / h;
  int64_t cw, ch;
  if (in_ratio < ratio.first) {
    cw = img.width;
    ch = int64_t(std::lround(double(cw) / ratio.first));
  } else if (in_ratio > ratio.second) {
    ch = img.height;
    cw = int64_t(std::lround(double(ch) * ratio.second));
  } else {
    cw = img.width;
    ch = img.height;
  }
  return {(img.height - ch) / 2, (img.width - cw) / 2, ch, cw};
}

Image RandomResizedCrop::operator()(const Image& img, Generator& g) const {
  const auto [top, left, ch, cw] = get_params(img, g);
  return resize(img, width, height, resample, Box{double(left), double(top), double(left + cw), double(top + ch)});
}

Image RandomHorizontalFlip::operator()(const Image& img, Generator& g) const {
  return g.next_double() < p ? flip_horizontal(img) : img;
}

double sample_gamma(double shape, Generator& g) {
  BOOSTER_CHECK(shape > 0, "sample_gamma: shape must be positive, got ", shape);
  if (shape < 1.0) {  // boost: Gamma(a) = Gamma(a + 1) * U^(1/a)
    const double u = 1.0 - g.next_double();
    return sample_gamma(shape + 1.0, g) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      const double u1 = 1.0 - g.next_double(), u2 = g.next_double();
      x = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - g.next_double();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

double sample_beta(double a, double b, Generator& g) {
  const double x = sample_gamma(a, g), y = sample_gamma(b, g);
  return x / (x + y);
}

std::tuple<Tensor, Tensor, double> Mixup::operator()(const Tensor& pixel_values, const Tensor& labels, Generator& g) const {
  BOOSTER_CHECK(num_classes > 0, "Mixup: num_classes must be set");
  BOOSTER_CHECK_T(ShapeError, pixel_values.dim() >= 2 && labels.dim() == 1 && labels.size(0) == pixel_values.size(0),
                  "Mixup: need inputs [B, ...] and labels [B], got ", shape_str(pixel_values.shape()), " and ",
                  shape_str(labels.shape()));
  const double lam = alpha > 0 ? sample_beta(alpha, alpha, g) : 1.0;
  const int64_t b = pixel_values.size(0), per = pixel_values.numel() / std::max<int64_t>(b, 1);
  Tensor x = pixel_values.detach().to(DType::f32).contiguous();
  Tensor mixed = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* pm = mixed.data<float>();
  const float l = float(lam), m = float(1 - lam);
  for (int64_t i = 0; i < b; ++i) {
    const float* a = px + i * per;
    const float* o = px + (b - 1 - i) * per;
    float* d = pm + i * per;
    for (int64_t k = 0; k < per; ++k) d[k] = l * a[k] + m * o[k];
  }
  auto y = labels.to_int_vector();
  const double off = label_smoothing / double(num_classes), on = 1.0 - label_smoothing + off;
  std::vector<float> t(static_cast<size_t>(b * num_classes));
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t k = 0; k < num_classes; ++k) {
      const double a = y[size_t(i)] == k ? on : off, o = y[size_t(b - 1 - i)] == k ? on : off;
      t[size_t(i * num_classes + k)] = float(lam * a + (1 - lam) * o);
    }
  }
  return {mixed, Tensor::from_vector(t, {b, num_classes}), lam};
}

double Mixup::apply(TensorMap& batch, Generator& g, const std::string& input_key) const {
  auto x = batch.find(input_key);
  auto y = batch.find("labels");
  BOOSTER_CHECK(x != batch.end() && y != batch.end(), "Mixup: the batch needs '", input_key, "' and 'labels', it has {",
                describe_keys(batch), "}");
  BOOSTER_CHECK_T(DTypeError, is_floating(x->second.dtype()), "Mixup: '", input_key, "' must be floating to be mixed, it is ",
                  dtype_name(x->second.dtype()));
  auto [mixed, targets, lam] = (*this)(x->second, y->second, g);
  x->second = mixed;
  y->second = targets;
  return lam;
}

}  // namespace booster::data
