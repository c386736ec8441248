// Raw kernels without autograd, for the engine, optimizers and collectives.
#pragma once

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// dst += src (same shape; src of any float dtype and strides; dst contiguous).
void add_(Tensor& dst, const Tensor& src);
/// dst *= s (contiguous float dst).
void scale_(Tensor& dst, double s);
/// Sum of squares of all elements, accumulated in double.
double sum_squares(const Tensor& t);
/// True when every element is finite.
bool all_finite(const Tensor& t);

/// a x b (+ bias broadcast over rows) into a new tensor of out_shape (matmul_ops.cpp).
Tensor mm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape);
/// Sum over dims, in x's dtype, computed in f32 (reduce_ops.cpp).
Tensor sum_dims(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace booster::kernels
