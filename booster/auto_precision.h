// mixed_precision = "auto": bf16 where this CPU's bf16 matmul runs faster than its fp32 one,
// fp32 elsewhere. On a CPU with AMX or with AVX512-BF16 at twice the fp32 rate (Zen 4/5)
// bf16 pays; on a Xeon with AVX512-BF16 but no AMX oneDNN's bf16 matmul runs at about half
// its fp32 rate, and bf16 would only slow the step. Measured once a process, at a
// transformer's MLP shape, by every rank at once (their sum decides, so all choose alike).
#pragma once

#include <string>

namespace booster {

/// What "auto" chose and the measurement behind it.
struct AutoPrecision {
  std::string precision;                // "bf16" or "fp32"
  double bf16_gflops = 0, fp32_gflops = 0;  // summed over the ranks
  std::string why;                      // "bf16 matmul 442 GFLOP/s against fp32's 225 on this CPU: bf16"
};

/// bf16 when its matmul runs at least 1.1x the fp32 one ([1024, 768] x [768, 3072], the
/// best of 5 after a warm-up); the first call measures (collective when MPI runs: call it on
/// every rank) and logs the choice, later calls return it.
const AutoPrecision& auto_precision();
/// `requested`, or auto_precision()'s choice when it is "auto".
std::string resolve_precision(const std::string& requested);

}  // namespace booster
