// a^T b (the weight gradient's product, dW = dy^T x) in bf16 on AVX512-BF16 tiles, for the
// CPUs without AMX where oneDNN 2.6 runs it on vdpbf16ps too (matmul_tn_avx512.cpp).
#pragma once

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// True when mm_tn_bf16_avx512 runs a, b on this CPU: AVX512-BF16 without AMX, both bf16
/// [M, P] and [M, Q] with rows of unit stride (any row stride), M > 0.
bool mm_tn_bf16_avx512_fits(const Tensor& a, const Tensor& b);

/// a^T b, [P, Q] bf16: products accumulated in f32 over all M rows, rounded once.
Tensor mm_tn_bf16_avx512(const Tensor& a, const Tensor& b);

}  // namespace booster::kernels
