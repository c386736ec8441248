// The CheckpointIO seam: how a plugin saves and loads the boosted objects. The one
// implementation, GeneralCheckpointIO, serves every plugin: each rank writes and reads what
// its wrappers say it holds (ModelWrapper::checkpoint_state, OptimizerWrapper::state_layout).
#pragma once

#include <functional>
#include <string>

#include "booster/model_wrapper.h"
#include "booster/optimizer_wrapper.h"
#include "optim/lr_scheduler.h"

namespace booster {

class CheckpointIO {
 public:
  virtual ~CheckpointIO() = default;
  /// use_async: the state is copied and written by a background thread (synchronize()
  /// waits for it, and raises its error); else written before it returns.
  virtual void save_model(ModelWrapper& model, const std::string& path, bool shard, const std::string& prefix,
                          int64_t size_per_shard_mb, bool use_async) = 0;
  virtual void load_model(ModelWrapper& model, const std::string& path, bool strict) = 0;
  virtual void save_optimizer(OptimizerWrapper& optimizer, const std::string& path, bool shard,
                              const std::string& prefix, int64_t size_per_shard_mb, bool use_async) = 0;
  virtual void load_optimizer(OptimizerWrapper& optimizer, const std::string& path) = 0;
  virtual void save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) = 0;
  virtual void load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) = 0;
  /// Records the precision the run trains in (Booster's mixed precision, when the plugin
  /// does not own precision), for the checkpoints' layout record.
  virtual void set_precision(const std::string& precision) {}
  /// Waits for the asynchronous saves in flight (Colossal-AI's name); raises the first error
  /// one met, on every rank. Collective.
  virtual void synchronize() = 0;
  /// Runs `task` once the saves in flight are written (on the background thread, with every
  /// rank: a run checkpoint's progress file, which marks it complete), or now when none is.
  /// Collective.
  virtual void after_saves(const std::function<void()>& task, const std::string& what) = 0;
};

}  // namespace booster
