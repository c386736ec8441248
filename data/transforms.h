// Training augmentation with torchvision / timm semantics: RandomResizedCrop,
// RandomHorizontalFlip, and Mixup (mixed images plus soft targets for cross_entropy_soft).
#pragma once

#include <utility>

#include "core/tensor/random.h"
#include "core/tensor/tensor_map.h"
#include "data/resample.h"

namespace booster::data {

/// torchvision.transforms.RandomResizedCrop.
struct RandomResizedCrop {
  int64_t height = 224, width = 224;
  std::pair<double, double> scale{0.08, 1.0};
  std::pair<double, double> ratio{3.0 / 4.0, 4.0 / 3.0};
  Resample resample = Resample::bilinear;
  /// The crop box (top, left, h, w) torchvision's get_params would pick.
  std::array<int64_t, 4> get_params(const Image& img, Generator& g) const;
  Image operator()(const Image& img, Generator& g) const;
};

/// torchvision.transforms.RandomHorizontalFlip.
struct RandomHorizontalFlip {
  double p = 0.5;
  Image operator()(const Image& img, Generator& g) const;
};

/// A Gamma(shape, 1) draw (Marsaglia-Tsang).
double sample_gamma(double shape, Generator& g);
/// A Beta(a, b) draw.
double sample_beta(double a, double b, Generator& g);

/// timm-style Mixup on a batch: lam ~ Beta(alpha, alpha); x = lam x + (1 - lam) x.flip(0);
/// targets = lam onehot(y) + (1 - lam) onehot(y.flip(0)), smoothed by label_smoothing.
struct Mixup {
  double alpha = 0.8;
  double label_smoothing = 0.0;
  int64_t num_classes = 0;
  /// Mixes inputs [B, ...] (pixel_values [B, C, H, W]) in place of a copy; returns (mixed, soft targets [B, K], lam).
  std::tuple<Tensor, Tensor, double> operator()(const Tensor& pixel_values, const Tensor& labels, Generator& g) const;
  /// Mixes a batch's `input_key` (any floating [B, ...] tensor) and replaces its "labels" by
  /// the soft targets; returns lam. A missing or integer input is an error naming the key.
  double apply(TensorMap& batch, Generator& g, const std::string& input_key = "pixel_values") const;
};

}  // namespace booster::data
