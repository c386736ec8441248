// Parameter initializers (torch.nn.init names). Each is a no-op under SkipInitGuard,
// since clone() and from_pretrained() overwrite the values anyway.
#pragma once

#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace booster::nn::init {

/// Truncated normal with absolute bounds [a, b], as torch.nn.init.trunc_normal_.
void trunc_normal_(Tensor& t, double mean, double std, double a = -2.0, double b = 2.0);
/// Normal(mean, std).
void normal_(Tensor& t, double mean, double std);
/// U[lo, hi).
void uniform_(Tensor& t, double lo, double hi);
/// All zeros.
void zeros_(Tensor& t);
/// All ones.
void ones_(Tensor& t);
/// PyTorch's default Linear/Conv init: weight U(+-1/sqrt(fan_in)) (kaiming_uniform with
/// a = sqrt(5)), bias U(+-1/sqrt(fan_in)).
void default_layer_init_(Tensor& weight, Tensor* bias, int64_t fan_in);

}  // namespace booster::nn::init
