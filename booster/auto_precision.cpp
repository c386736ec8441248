// mixed_precision = "auto" (see auto_precision.h).
#include "booster/auto_precision.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "core/tensor/random.h"

namespace booster {

namespace {

// GFLOP/s of the fastest of 5 products [m, k] x [k, n] in `dt`, after one to warm up.
double matmul_gflops(DType dt) {
  constexpr int64_t m = 1024, k = 768, n = 3072;
  Tensor a = Tensor::empty({m, k}), b = Tensor::empty({k, n});
  Generator g(7);
  g.normal_(a), g.normal_(b);
  a = a.to(dt), b = b.to(dt);
  NoGradGuard ng;
  matmul(a, b);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor c = matmul(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * k * n / best / 1e9;
}

}  // namespace

const AutoPrecision& auto_precision() {
  static const AutoPrecision chosen = [] {
    AutoPrecision a;
    a.fp32_gflops = matmul_gflops(DType::f32);
    a.bf16_gflops = matmul_gflops(DType::bf16);
    if (dist::is_initialized() && dist::world_size() > 1) {  // every rank decides on the same sums
      a.fp32_gflops = dist::all_reduce_scalar(a.fp32_gflops, dist::ReduceOp::sum);
      a.bf16_gflops = dist::all_reduce_scalar(a.bf16_gflops, dist::ReduceOp::sum);
    }
    a.precision = a.bf16_gflops >= 1.1 * a.fp32_gflops ? "bf16" : "fp32";
    char why[200];
    std::snprintf(why, sizeof why, "bf16 matmul %.0f GFLOP/s against fp32's %.0f on this CPU: %s", a.bf16_gflops,
                  a.fp32_gflops, a.precision == "bf16" ? "bf16 (at least 1.1x)" : "fp32 (bf16 would not pay)");
    a.why = why;
    if (!dist::is_initialized() || dist::world_rank() == 0) spdlog::info("mixed_precision auto: {}", a.why);
    return a;
  }();
  return chosen;
}

std::string resolve_precision(const std::string& requested) {
  return requested == "auto" ? auto_precision().precision : requested;
}

}  // namespace booster
