// Gradient clipping: by global norm (with a seam to sum the norm across ranks) and by value.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::optim {

/// Combines a local sum of |g|^p (or a max for the inf norm) across ranks; identity when
/// there is one process. Data-parallel plugins pass their all-reduce here.
using NormReducer = std::function<double(double local, bool is_max)>;

/// How a global norm is formed across ranks: `reduce` combines the local pieces; `counts`
/// says whether this rank counts a parameter's gradient (a parameter replicated over the
/// reducing ranks is counted by one of them, so it enters the norm once). Default: one
/// process, every parameter.
struct NormScope {
  NormReducer reduce;
  std::function<bool(const Tensor& param)> counts;
  double combine(double local, bool is_max) const { return reduce ? reduce(local, is_max) : local; }
  bool count(const Tensor& param) const { return !counts || counts(param); }
};

/// The total norm of the counted gradients (norm_type 2, 1, or inf = INFINITY), summed in double.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0, const NormScope& scope = {});

/// Scales every gradient so the total norm (over the counted ones) is at most max_norm (clip_coef = max_norm /
/// (norm + 1e-6), as PyTorch). Returns the norm before clipping. A non-finite norm is
/// returned as is, gradients untouched, or raised as ValueError with error_if_nonfinite.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false, const NormScope& scope = {});

/// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

/// grad_norm of gradient tensors themselves (a ZeRO rank's gradient chunks).
double norm_of(const std::vector<Tensor>& grads, double norm_type = 2.0, const NormReducer& reduce = {});
/// Clamps every element of these tensors to [-clip_value, clip_value].
void clamp_values(const std::vector<Tensor>& tensors, double clip_value);

}  // namespace booster::optim
