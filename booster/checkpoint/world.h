// The ranks a checkpoint is saved or loaded by: the MPI world when it runs, else this
// process alone (tools and single-process programs need no mpirun). Its collectives go over
// the world's communicator, or over `group` (the world's ranks on a communicator of their
// own: an asynchronous save's background thread, beside training's collectives).
#pragma once

#include <string>
#include <vector>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace booster::ckpt {

struct World {
  const dist::ProcessGroup* group = nullptr;  // null: the world's communicator
  bool multi = dist::is_initialized() && dist::world_size() > 1;
  int rank() const { return multi ? dist::world_rank() : 0; }
  int size() const { return multi ? dist::world_size() : 1; }
  /// Every rank's bytes, in rank order.
  std::vector<std::string> all_gather(const std::string& mine) const {
    if (!multi) return {mine};
    return group ? dist::all_gather_bytes(mine, *group) : dist::all_gather_bytes(mine);
  }
};

}  // namespace booster::ckpt
