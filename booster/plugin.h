// The Plugin contract (Colossal-AI's Plugin base). A plugin declares what it controls and
// rewrites the boosted objects in configure(): it wraps the model wrapper and the optimizer
// chain in its own (TorchDDPModel, ...), and what it puts in BoostedObjects is what boost()
// returns. Booster never asks which plugin it holds. A new plugin is a new folder under
// plugins/ plus a line in the registry; docs/writing_a_plugin.md walks through one.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "booster/boosted_objects.h"
#include "core/dist/process_group.h"
#include "core/kernels/dispatch.h"
#include "data/dataloader.h"
#include "optim/lr_scheduler.h"

namespace booster {

class CheckpointIO;

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

/// execute_pipeline without a pipeline: the iterator's next batch through the whole model
/// (any module nn::forward_named runs) as its only stage, the criterion on its outputs, backward through
/// the optimizer chain (or the loss's own backward without one); the same PipelineResult as
/// a pipeline's last stage returns.
PipelineResult run_as_one_stage(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                OptimizerWrapper* optimizer, bool return_loss, bool return_outputs);

/// Every rank of `g` takes its first rank's parameters and buffers (what a data-parallel
/// plugin does at configure, as PyTorch's DDP does at construction). skip_shards: leave
/// tensor-parallel shards (tensors with a region) alone, as the ranks of a tensor-parallel
/// group hold different ones. common_only: only the tensors every member holds (a pipeline
/// group whose stages may already hold only their own layers).
void broadcast_module_state(const nn::Module& module, const dist::ProcessGroup& g, bool skip_shards = false,
                            bool common_only = false);

class Plugin {
 public:
  virtual ~Plugin() = default;
  /// Registry name, e.g. "torch_ddp".
  virtual std::string name() const = 0;
  virtual std::vector<std::string> supported_precisions() const = 0;
  /// True when the plugin applies its own precision (Booster's mixed_precision is ignored).
  virtual bool control_precision() const = 0;
  /// The [plugin] key that sets the precision of a plugin that controls it (Colossal-AI's
  /// "precision"; PyTorch FSDP's and Galvatron's names differ).
  virtual std::string precision_option() const { return "precision"; }
  virtual bool control_checkpoint_io() const = 0;
  virtual bool support_no_sync() const = 0;
  virtual bool support_pipeline() const { return false; }
  /// The kernels the boosted model's attention and norms run (Booster::boost sets them
  /// process-wide): the fused ones unless the plugin's switches say otherwise.
  virtual kernels::FusedKernels fused_kernels() const { return {}; }
  /// True when the plugin's model runs under Booster's split_batch: its parameters stay
  /// whole through forward and backward, nothing hooks its modules, and it reads gradients
  /// only once they are accumulated.
  virtual bool support_split_batch() const { return false; }
  /// Colossal-AI's support_lora: whether a model with LoRA adapters (Booster::enable_lora)
  /// trains under this plugin. Every plugin here does (only the adapters are reduced,
  /// sharded and stepped); a layout that cannot hold them is refused when boost() shards it.
  virtual bool support_lora() const { return true; }

  /// Rewrites the objects: wraps objects.model and objects.optimizer in the plugin's
  /// wrappers (and prepares communication); boost() returns what it leaves there.
  virtual void configure(BoostedObjects& objects) = 0;
  /// The plugin's checkpoint IO.
  virtual std::shared_ptr<CheckpointIO> get_checkpoint_io() = 0;
  /// Gradient accumulation without communication until the scope ends (default: through
  /// the model's GradSync, when support_no_sync()).
  virtual NoSyncScope no_sync(ModelWrapper& model, OptimizerWrapper* optimizer);
  /// A DataLoader whose sampler gives this rank its data-parallel share (Colossal-AI's
  /// prepare_dataloader arguments: batch_size, shuffle, seed, drop_last, num_workers).
  virtual std::shared_ptr<data::DataLoader> prepare_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                                               const data::DataLoaderOptions& options);
  /// Runs one pipeline step. Without a pipeline (the default): the whole model as one stage
  /// on one micro-batch (run_as_one_stage), so a loop written for execute_pipeline runs
  /// under every plugin.
  virtual PipelineResult execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                          OptimizerWrapper* optimizer, bool return_loss, bool return_outputs);
  /// The data-parallel size (Colossal-AI's plugin.dp_size): how many ranks see different
  /// data. The global batch, and the learning rate scaled with it, grow with it.
  int dp_size() const { return dp_rank_size().second; }
  /// This rank's index in its data-parallel group.
  int dp_rank() const { return dp_rank_size().first; }
  /// The global batch the plugin's plan fixes (Galvatron's global_bsz), 0 when the run decides.
  virtual int64_t global_batch_size() const { return 0; }

 protected:
  /// This rank's data-parallel group: rank and size (all ranks by default).
  virtual std::pair<int, int> dp_rank_size() const;
};

}  // namespace booster
