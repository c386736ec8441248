// GeneralCheckpointIO: the one checkpoint IO of every plugin. Model and optimizer state
// are saved by every rank at once, each writing what its wrappers say it holds (whole
// tensors, tensor-parallel boxes, ZeRO flat ranges, a pipeline stage's layers), and loaded
// by every rank reading only the regions it holds, whatever layout wrote them. The lr
// scheduler and the training progress are small and written by rank 0.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "booster/checkpoint/async_writer.h"
#include "booster/checkpoint_io.h"
#include "proto/checkpoint.pb.h"

namespace booster {

class GeneralCheckpointIO : public CheckpointIO {
 public:
  /// `layout` is recorded in every index (informational).
  explicit GeneralCheckpointIO(proto::Layout layout = {}) : layout_(std::move(layout)) {}
  void save_model(ModelWrapper& model, const std::string& path, bool shard, const std::string& prefix,
                  int64_t size_per_shard_mb, bool use_async) override;
  /// strict: missing, unexpected or mismatched tensors are an error; otherwise the rest
  /// loads and they are logged.
  void load_model(ModelWrapper& model, const std::string& path, bool strict) override;
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& path, bool shard, const std::string& prefix,
                      int64_t size_per_shard_mb, bool use_async) override;
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& path) override;
  void save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) override;
  void load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) override;
  /// Fills the layout's precision when the plugin left it empty.
  void set_precision(const std::string& precision) override {
    if (layout_.precision().empty()) layout_.set_precision(precision);
  }
  void synchronize() override { async_.synchronize(); }
  void after_saves(const std::function<void()>& task, const std::string& what) override;
  /// The bytes an asynchronous save may copy; beyond them it writes before returning
  /// (default: BOOSTER_ASYNC_STAGING_MB, else half the RAM available).
  void set_async_staging_bytes(size_t bytes) { staging_bytes_ = bytes; }

 private:
  proto::Layout layout_;
  std::optional<size_t> staging_bytes_;
  ckpt::AsyncWriter async_;  // last: destroyed first, waiting for its saves
};

/// A plugin's checkpoint IO: a GeneralCheckpointIO recording the plugin's layout, made at
/// the first get() and kept (a plugin holds one and returns get(...) from get_checkpoint_io()).
class LayoutCheckpointIO {
 public:
  /// For a plugin whose ranks form (dp, tp, pp) of the world, holding `precision`.
  std::shared_ptr<CheckpointIO> get(const std::string& plugin, int dp, int tp, int pp, const std::string& precision);

 private:
  std::shared_ptr<CheckpointIO> io_;
};

/// The layout recorded in a checkpoint's index (informational; any layout loads).
proto::Layout checkpoint_layout(const std::string& plugin, int world_size, int dp, int tp, int pp,
                                const std::string& precision);

/// Reads a TrainingProgress.
proto::TrainingProgress load_progress(const std::string& path);

}  // namespace booster
