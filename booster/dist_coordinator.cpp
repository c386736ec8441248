// DistCoordinator (see dist_coordinator.h).
#include "booster/dist_coordinator.h"

#include <cstdio>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/common/check.h"

namespace booster {

DistCoordinator::DistCoordinator()
    : rank_(dist::world_rank()), world_size_(dist::world_size()), local_rank_(dist::local_rank()) {
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(), "DistCoordinator: call dist::launch_from_openmpi() first");
}

void DistCoordinator::print_on_master(const std::string& msg) const {
  if (!is_master()) return;
  std::printf("%s\n", msg.c_str());
  std::fflush(stdout);
}

void DistCoordinator::block_all() const { dist::barrier(); }

void DistCoordinator::on_master_only(const std::function<void()>& fn, bool sync) const {
  if (is_master()) fn();
  if (sync) block_all();
}

}  // namespace booster
