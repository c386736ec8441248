// LayerNorm over the last dimension on AVX-512 (layer_norm_avx512.cpp): a row at a time while
// it is in L1, statistics and arithmetic in f32, f32 or bf16 storage. Only where
// avx512::cpu_ok() (avx512_cpu.h).
#pragma once

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// y = (x - mean) rstd w + b over the rows of x2 [rows, c] (f32 or bf16, contiguous; y of the
/// same dtype and shape; w, b may be null: 1 and 0); writes each row's mean and
/// rstd = 1 / sqrt(var + eps) (biased variance).
void layer_norm_fwd_avx512(const Tensor& x2, const float* w, const float* b, const Tensor& y, float* mean, float* rstd,
                           float eps);

/// dx for dy (both like x2), from the forward's mean and rstd; with dw (then also db),
/// dw = sum dy xhat and db = sum dy over rows (f32, summed per thread in row order, then
/// across threads in thread order).
void layer_norm_bwd_avx512(const Tensor& x2, const float* w, const float* mean, const float* rstd, const Tensor& dy,
                           const Tensor& dx, float* dw, float* db);

}  // namespace booster::kernels
