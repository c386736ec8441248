// Gradient clipping (see clip.h).
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/kernels/raw.h"

namespace booster::optim {

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const NormScope& scope = {}) {
  std::vector<Tensor> out;
  for (const auto& p : params)
    if (p.grad().defined() && scope.count(p)) out.push_back(p.grad());
  return out;
}
}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type, const NormScope& scope) {
  return norm_of(grads_of(params, scope), norm_type, scope.reduce);
}

double norm_of(const std::vector<Tensor>& grads, double norm_type, const NormReducer& reduce) {
  BOOSTER_CHECK(norm_type > 0, "grad_norm: norm_type must be positive, got ", norm_type);
  const bool is_max = std::isinf(norm_type);
  double acc = 0;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    if (norm_type == 2.0) {
      acc += kernels::sum_squares(g);
    } else {
      for (float v : g.to_vector()) {
        const double a = std::abs(double(v));
        if (is_max) acc = std::max(acc, std::isnan(a) ? INFINITY : a);
        else acc += std::pow(a, norm_type);
      }
    }
  }
  if (reduce) acc = reduce(acc, is_max);
  return is_max ? acc : std::pow(acc, 1.0 / norm_type);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite,
                      const NormScope& scope) {
  const double total = grad_norm(params, norm_type, scope);
  if (!std::isfinite(total)) {
    BOOSTER_CHECK(!error_if_nonfinite, "clip_grad_norm: the total norm of order ", norm_type, " is ", total,
                  ": gradients are non-finite");
    return total;
  }
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    NoGradGuard ng;
    for (const auto& p : params) {
      Tensor g = p.grad();
      if (g.defined()) kernels::scale_(g, coef);
    }
  }
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value) { clamp_values(grads_of(params), clip_value); }

void clamp_values(const std::vector<Tensor>& tensors, double clip_value) {
  BOOSTER_CHECK(clip_value >= 0, "clip_grad_value: clip_value must be >= 0, got ", clip_value);
  const float c = float(clip_value);
  for (Tensor g : tensors) {
    if (!g.defined()) continue;
    if (g.dtype() == DType::f32 && g.is_contiguous()) {
      float* d = g.data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) d[i] = std::clamp(d[i], -c, c);
    } else {
      auto v = g.to_vector();
      for (float& x : v) x = std::clamp(x, -c, c);
      g.copy_(Tensor::from_vector(v, g.shape()));
    }
  }
}

}  // namespace booster::optim
