// DistCoordinator (Colossal-AI's name): who this process is and master-only helpers.
#pragma once

#include <functional>
#include <string>

namespace booster {

class DistCoordinator {
 public:
  /// Requires dist::launch_from_openmpi() to have run.
  DistCoordinator();
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  /// True on global rank 0.
  bool is_master() const { return rank_ == 0; }
  /// True on local rank 0 of each node.
  bool is_node_master() const { return local_rank_ == 0; }
  /// True on the last global rank.
  bool is_last_process() const { return rank_ == world_size_ - 1; }
  /// Prints a line on the master only.
  void print_on_master(const std::string& msg) const;
  /// Barrier over every process.
  void block_all() const;
  /// Runs fn on the master only; with `sync`, every rank then waits for it.
  void on_master_only(const std::function<void()>& fn, bool sync = false) const;

 private:
  int rank_, world_size_, local_rank_;
};

}  // namespace booster
