// A process group: an MPI communicator with a name (for errors and the watchdog) and the
// world ranks it holds.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace booster::dist {

class ProcessGroup {
 public:
  /// Wraps `comm` (owned: freed with the group unless it is MPI_COMM_WORLD).
  ProcessGroup(MPI_Comm comm, std::string name);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// The group of every process (launch_from_openmpi must have run).
  static ProcessGroup& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  const std::string& name() const { return name_; }
  /// World ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const { return ranks_; }
  /// Group rank of a world rank; throws ValueError naming the group when not a member.
  int group_rank_of(int world_rank) const;
  /// A tag for the point-to-point messages of the next collective built from them (ring
  /// reduce-scatter): every rank issues collectives in the same order, so every rank draws
  /// the same tag, from a range above the tags send/recv may use (below kUserTagLimit).
  int next_collective_tag() const;

 private:
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> ranks_;
  mutable int64_t collective_seq_ = 0;
};

/// send/recv tags must stay below this; collectives use the tags above it.
constexpr int kUserTagLimit = 1 << 20;

using GroupPtr = std::shared_ptr<ProcessGroup>;

/// Splits `parent` by color (MPI_Comm_split, collective over parent); ranks ordered by key.
GroupPtr split_group(const ProcessGroup& parent, int color, int key, const std::string& name);

}  // namespace booster::dist
