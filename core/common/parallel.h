// OpenMP work splitting shared by kernels and optimizers: one loop helper, so every
// parallel pass over memory splits the same way and stays inline for tiny inputs.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace booster {

/// Runs f(begin, end) over [0, n) split across OpenMP threads; inline below `grain`
/// elements so tiny tensors pay no thread start-up.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= grain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

/// Elements below which elementwise loops stay on one thread.
constexpr int64_t kGrain = 1 << 15;

}  // namespace booster
