// Loading and saving a rank's share of model and optimizer state, collectively: every rank
// reads only the regions it holds; missing, unexpected and mismatched tensors are found
// over all ranks; an error on any rank is raised on every rank (no rank is left waiting in
// a collective). Optimizer metadata (groups, steps) is merged over the ranks that hold
// different parameters (pipeline stages).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "booster/checkpoint/reader.h"
#include "core/dist/process_group.h"
#include "booster/optimizer_wrapper.h"

namespace booster::ckpt {

/// What did not line up, over all ranks.
struct LoadReport {
  std::vector<std::string> missing, unexpected, mismatched;
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  /// "\n  missing: a\n  unexpected: b ..." (empty when ok).
  std::string str() const;
};

/// Runs f on every rank; if it throws on any, every rank throws the same error, naming the
/// failing ranks (the type of the lowest failing rank's error: ValueError, IOError, ...).
/// `group`: the world's ranks on another communicator (null: the world's).
void on_every_rank(const std::function<void()>& f, const std::string& what, const dist::ProcessGroup* group = nullptr);

/// Fills `dst` from the checkpoint. strict: any missing, unexpected or mismatched tensor is
/// a ValueError on every rank, raised before anything is read.
LoadReport load_state(CheckpointReader& r, const ShardedState& dst, bool strict, const std::string& what);

/// This rank's optimizer state to save, with the metadata merged over all ranks.
struct OptimizerShare {
  proto::OptimizerMeta meta;
  ShardedState tensors;  // "<param>/<state>", each in its parameter's region
};
OptimizerShare optimizer_share(const OptimizerWrapper& o);
/// Loads the state of the parameters this rank's optimizer holds (any layout wrote it).
void load_optimizer_share(CheckpointReader& r, OptimizerWrapper& o);

}  // namespace booster::ckpt
