// The Plugin contract (Colossal-AI's Plugin base). A plugin declares what it controls and
// rewrites the boosted objects in place in configure(); Booster never asks which plugin
// it holds. A new plugin is a new folder under plugins/ plus a line in the registry.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "booster/model_wrapper.h"
#include "booster/optimizer_wrapper.h"
#include "data/dataloader.h"
#include "optim/lr_scheduler.h"

namespace booster {

class CheckpointIO;

/// loss = criterion(logits, labels).
using Criterion = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;

/// The five objects boost() hands to configure() and returns.
struct BoostedObjects {
  std::shared_ptr<BoostedModel> model;
  std::shared_ptr<OptimizerWrapper> optimizer;
  Criterion criterion;
  std::shared_ptr<data::DataLoader> dataloader;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
};

/// Arguments of prepare_dataloader (Colossal-AI's names and defaults).
struct DataLoaderArgs {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 1024;
  bool drop_last = false;
  int num_workers = 0;
};

/// A scope in which gradients accumulate locally (ends when destroyed).
class NoSyncScope {
 public:
  NoSyncScope() = default;
  explicit NoSyncScope(std::function<void()> on_exit) : on_exit_(std::move(on_exit)) {}
  ~NoSyncScope() {
    if (on_exit_) on_exit_();
  }
  NoSyncScope(NoSyncScope&& o) noexcept : on_exit_(std::move(o.on_exit_)) { o.on_exit_ = nullptr; }
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  std::function<void()> on_exit_;
};

/// Result of execute_pipeline.
struct PipelineResult {
  Tensor loss;
  Tensor outputs;
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  /// Registry name, e.g. "torch_ddp".
  virtual std::string name() const = 0;
  virtual std::vector<std::string> supported_precisions() const = 0;
  /// True when the plugin applies its own precision (Booster's mixed_precision is ignored).
  virtual bool control_precision() const = 0;
  virtual bool control_checkpoint_io() const = 0;
  virtual bool support_no_sync() const = 0;
  virtual bool support_pipeline() const { return false; }

  /// Rewrites the objects in place (wraps the model and optimizer, prepares communication).
  virtual void configure(BoostedObjects& objects) = 0;
  /// The plugin's checkpoint IO.
  virtual std::shared_ptr<CheckpointIO> get_checkpoint_io() = 0;
  /// Gradient accumulation without communication until the scope ends.
  virtual NoSyncScope no_sync(BoostedModel& model, OptimizerWrapper* optimizer);
  /// A DataLoader whose sampler gives this rank its data-parallel share.
  virtual std::shared_ptr<data::DataLoader> prepare_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                                               const DataLoaderArgs& args) = 0;
  /// Runs one pipeline step; plugins without a pipeline say so.
  virtual PipelineResult execute_pipeline(const std::function<std::optional<data::Batch>()>& data_iter,
                                          BoostedModel& model, const Criterion& criterion, OptimizerWrapper* optimizer,
                                          bool return_loss, bool return_outputs);
};

}  // namespace booster
