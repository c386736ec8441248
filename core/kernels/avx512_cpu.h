// Whether this CPU runs the hand-written AVX-512 kernels (checked once, at run time), for
// the ops that choose between them and oneDNN. No intrinsics: any translation unit includes it.
// Each answer is also capped by oneDNN's effective ISA, so ONEDNN_MAX_CPU_ISA (say AVX2)
// limits the own kernels as it does oneDNN's: an AVX-512 machine then runs as an AVX2 one.
#pragma once

namespace booster::kernels::avx512 {

/// True when this CPU has what BOOSTER_AVX512 code needs (F, BW, DQ, VL).
bool cpu_ok();
/// True when it also has AVX512-BF16 (BOOSTER_AVX512_BF16 code).
bool cpu_bf16_ok();
/// True when oneDNN runs its AMX kernels here (bf16 matmuls on tiles).
bool cpu_amx_ok();

}  // namespace booster::kernels::avx512
