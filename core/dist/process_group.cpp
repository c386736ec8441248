// Process groups over MPI communicators.
#include "core/dist/process_group.h"

#include "core/dist/runtime.h"
#include "core/dist/watchdog.h"
#include "core/common/check.h"

namespace booster::dist {

ProcessGroup::ProcessGroup(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int me = world_rank();
  ranks_.resize(size_t(size_));
  WatchdogScope wd("member exchange", name_);
  MPI_Allgather(&me, 1, MPI_INT, ranks_.data(), 1, MPI_INT, comm_);
}

ProcessGroup::~ProcessGroup() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

ProcessGroup& ProcessGroup::world() {
  BOOSTER_CHECK_T(BackendError, is_initialized(), "dist: call launch_from_openmpi() before using process groups");
  static ProcessGroup* w = new ProcessGroup(MPI_COMM_WORLD, "world");
  return *w;
}

int ProcessGroup::group_rank_of(int world_rank) const {
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i] == world_rank) return int(i);
  BOOSTER_THROW(ValueError, "rank ", world_rank, " is not a member of process group '", name_, "'");
}

int ProcessGroup::next_collective_tag() const {
  static const int64_t upper = [] {
    void* v = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
    return flag && v ? int64_t(*static_cast<int*>(v)) : int64_t(32767);
  }();
  const int64_t span = upper - kUserTagLimit;
  BOOSTER_CHECK_T(BackendError, span > 64, "MPI's largest tag (", upper, ") leaves no room for collective tags");
  return int(kUserTagLimit + (collective_seq_++ % span));
}

GroupPtr split_group(const ProcessGroup& parent, int color, int key, const std::string& name) {
  MPI_Comm c;
  WatchdogScope wd("MPI_Comm_split", parent.name());
  BOOSTER_CHECK_T(BackendError, MPI_Comm_split(parent.comm(), color, key, &c) == MPI_SUCCESS,
                  "MPI_Comm_split of group '", parent.name(), "' failed");
  return std::make_shared<ProcessGroup>(c, name);
}

}  // namespace booster::dist
