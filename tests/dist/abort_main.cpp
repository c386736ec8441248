// Driver for the never-hang tests: `throw` makes the last rank throw while the others
// wait in a collective; `stall` makes it skip the collective so the watchdog must fire;
// `kill` makes it die by SIGKILL (no handler, no message: the launcher must end the job).
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

int main(int argc, char** argv) {
  using namespace booster;
  dist::LaunchOptions o;
  o.watchdog_timeout_s = 2;
  dist::launch_from_openmpi(o);
  const bool last = dist::world_rank() == dist::world_size() - 1;
  const std::string mode = argc > 1 ? argv[1] : "throw";
  if (last && mode == "throw") throw std::runtime_error("boom: simulated failure in the training step");
  if (last && mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(60));
  if (last && mode == "kill") std::raise(SIGKILL);
  Tensor t = Tensor::ones({8});
  dist::all_reduce(t);  // the other ranks wait here
  return 0;
}
