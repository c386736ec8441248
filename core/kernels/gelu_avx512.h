// Exact (erf) GELU with its derivative in one pass over memory, on AVX-512 (gelu_avx512.cpp):
// the forward keeps y' for the backward, which becomes one multiply.
#pragma once

#include <cstdint>

#include "core/common/dtype.h"

namespace booster::kernels {

/// y = x Phi(x) and d = Phi(x) + x phi(x) for n contiguous elements (computed in f32; bf16
/// rounded to nearest even). Only where avx512::cpu_ok() (avx512_cpu.h).
void gelu_with_grad(const float* x, float* y, float* d, int64_t n);
/// bf16 rounds with AVX512-BF16's conversion where the CPU has it; native_bf16 = false takes
/// the integer rounding every AVX-512 CPU runs (the same bits; tests compare the two).
void gelu_with_grad(const bf16_t* x, bf16_t* y, bf16_t* d, int64_t n, bool native_bf16 = true);

}  // namespace booster::kernels
