// The ranks a checkpoint is saved or loaded by: the MPI world when it runs, else this
// process alone (tools and single-process programs need no mpirun).
#pragma once

#include <string>
#include <vector>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace booster::ckpt {

struct World {
  bool multi = dist::is_initialized() && dist::world_size() > 1;
  int rank() const { return multi ? dist::world_rank() : 0; }
  int size() const { return multi ? dist::world_size() : 1; }
  /// Every rank's bytes, in rank order.
  std::vector<std::string> all_gather(const std::string& mine) const {
    return multi ? dist::all_gather_bytes(mine) : std::vector<std::string>{mine};
  }
};

}  // namespace booster::ckpt
