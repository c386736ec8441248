// LayerNorm over the last dimension on AVX-512 (layer_norm_avx512.cpp): a row at a time while
// it is in L1, statistics and arithmetic in f32, f32 or bf16 storage.
#pragma once

#include <cstdint>

#include "core/common/dtype.h"

namespace booster::kernels {

/// True when this CPU runs the kernels below (AVX-512 F/BW/DQ/VL; checked at run time).
bool layer_norm_avx512_supported();

/// y = (x - mean) rstd w + b over rows of c (w, b may be null: 1 and 0); writes each row's
/// mean and rstd = 1 / sqrt(var + eps) (biased variance).
template <typename T>
void layer_norm_fwd_avx512(const T* x, const float* w, const float* b, T* y, float* mean, float* rstd, int64_t rows,
                           int64_t c, float eps);

/// dx for dy, from the forward's mean and rstd; with w, also dw = sum dy xhat and db = sum dy
/// over rows (f32, summed per thread in row order, then across threads in thread order).
template <typename T>
void layer_norm_bwd_avx512(const T* x, const float* w, const float* mean, const float* rstd, const T* dy, T* dx,
                           float* dw, float* db, int64_t rows, int64_t c);

}  // namespace booster::kernels
