// omp_thread_handoff_ns (see handoff.h).
#include "handoff.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <limits>

namespace booster::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Spins until `line` holds `want`; false once `stop` is set, or past `deadline` (checked
// every 4096 polls).
bool wait_for(const std::atomic<int>& line, int want, const std::atomic<bool>& stop, Clock::time_point deadline) {
  for (int polls = 1;; ++polls) {
    if (line.load(std::memory_order_acquire) == want) return true;
    if (polls % 4096 == 0 && (stop.load(std::memory_order_relaxed) || Clock::now() > deadline)) return false;
  }
}

}  // namespace

double omp_thread_handoff_ns(int round_trips) {
  const double none = std::numeric_limits<double>::quiet_NaN();
  if (omp_get_max_threads() < 2 || omp_in_parallel() || round_trips < 1) return none;
  alignas(64) std::atomic<int> line{0};
  std::atomic<bool> stop{false};
  double ns = none;
  const auto deadline = Clock::now() + std::chrono::seconds(1);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() == 2) {
      // Thread 0 writes each odd value and waits for the next even one, which thread 1 writes.
      const int me = omp_get_thread_num();
      const auto t0 = Clock::now();
      bool ok = true;
      for (int i = 0; i < round_trips && ok; ++i) {
        if (me == 0) {
          line.store(2 * i + 1, std::memory_order_release);
          ok = wait_for(line, 2 * i + 2, stop, deadline);
        } else if ((ok = wait_for(line, 2 * i + 1, stop, deadline))) {
          line.store(2 * i + 2, std::memory_order_release);
        }
      }
      if (!ok) stop = true;
      if (me == 0 && ok) ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / round_trips;
    }
  }
  return stop ? none : ns;
}

}  // namespace booster::bench
