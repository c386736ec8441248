// a^T b (the weight gradient's product, dW = dy^T x) in bf16 on AVX512-BF16 tiles, for the
// CPUs without AMX where oneDNN 2.6 runs it on vdpbf16ps too (matmul_tn_avx512.cpp).
#pragma once

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// True when mm_tn_bf16_avx512 runs a, b on this CPU: AVX512-BF16 without AMX, both bf16
/// [M, P] and [M, Q] with rows of unit stride (any row stride), M > 0.
bool mm_tn_bf16_avx512_fits(const Tensor& a, const Tensor& b);

/// a^T b, [P, Q] bf16: products accumulated in f32 over all M rows, rounded once. With a_sums,
/// also a's column sums ([P] bf16: f32 in an order fixed by the shape, whatever the number of
/// threads, rounded once), taken in the pass that pairs a's rows for the product (a linear's
/// bias gradient beside its weight gradient).
Tensor mm_tn_bf16_avx512(const Tensor& a, const Tensor& b, Tensor* a_sums = nullptr);

}  // namespace booster::kernels
