// The benchmarks' measure of where the process's threads sit (bench/handoff.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "handoff.h"

using namespace booster;

TEST(Handoff, TwoThreadsGiveARoundTripOneGivesNone) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_TRUE(std::isnan(bench::omp_thread_handoff_ns(50)));
  omp_set_num_threads(2);
  // Few round trips: under a loaded ctest a thread may wait a time slice for the other one.
  const double ns = bench::omp_thread_handoff_ns(50);
  omp_set_num_threads(threads);
  EXPECT_GT(ns, 0.0);
  EXPECT_LT(ns, 1e9);  // a round trip, not the one-second deadline
  EXPECT_TRUE(std::isnan(bench::omp_thread_handoff_ns(0)));
}
