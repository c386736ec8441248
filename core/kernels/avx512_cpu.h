// Whether this CPU runs the hand-written AVX-512 kernels (checked once, at run time), for
// the ops that choose between them and oneDNN. No intrinsics: any translation unit includes it.
#pragma once

#include <cstdint>

namespace booster::kernels::avx512 {

/// True when this CPU has what BOOSTER_AVX512 code needs (F, BW, DQ, VL).
inline bool cpu_ok() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return ok;
}
/// True when it also has AVX512-BF16 (BOOSTER_AVX512_BF16 code).
inline bool cpu_bf16_ok() {
  static const bool ok = cpu_ok() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

}  // namespace booster::kernels::avx512
