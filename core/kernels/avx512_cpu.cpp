// The CPU's kernels, asked once (avx512_cpu.h).
#include "core/kernels/avx512_cpu.h"

#include <dnnl.hpp>

namespace booster::kernels::avx512 {
namespace {
// oneDNN's ISAs are bit masks, each holding the ones below it (AVX2-VNNI holds AVX2, not
// AVX-512), so "has" is a mask test, not an order.
bool onednn_has(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}
}  // namespace

bool cpu_ok() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                         onednn_has(dnnl::cpu_isa::avx512_core);
  return ok;
}

bool cpu_bf16_ok() {
  static const bool ok = cpu_ok() && __builtin_cpu_supports("avx512bf16") && onednn_has(dnnl::cpu_isa::avx512_core_bf16);
  return ok;
}

bool cpu_amx_ok() {
  static const bool ok = onednn_has(dnnl::cpu_isa::avx512_core_amx);
  return ok;
}

}  // namespace booster::kernels::avx512
