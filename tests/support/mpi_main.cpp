// gtest main for tests that run under mpirun: launches the runtime, runs the tests on
// every rank, and fails every rank when any rank failed.
#include <gtest/gtest.h>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

int main(int argc, char** argv) {
  booster::dist::LaunchOptions o;
  o.watchdog_timeout_s = 120;  // a failed assertion on one rank must not hang the others forever
  booster::dist::launch_from_openmpi(o);
  ::testing::InitGoogleTest(&argc, argv);
  const int local = RUN_ALL_TESTS();
  const double failed = booster::dist::all_reduce_scalar(local != 0 ? 1.0 : 0.0, booster::dist::ReduceOp::max);
  booster::dist::finalize();
  return failed > 0 ? 1 : 0;
}
