// Booster (mirrors colossalai.booster.Booster): boost() hands the user's five objects to
// the plugin, which wraps them; what the plugin produced is what boost() returns. backward,
// no_sync, execute_pipeline and the checkpoint calls forward to the plugin. Booster never
// asks which plugin it holds.
#pragma once

#include <memory>
#include <string>

#include "booster/checkpoint_io.h"
#include "booster/grad_sync.h"
#include "booster/plugin.h"

namespace booster {

/// What boost() returns, in Colossal-AI's order (structured bindings work).
template <typename M>
struct BoostResult {
  BoostedModel<M> model;
  std::shared_ptr<OptimizerWrapper> optimizer;
  Criterion criterion;
  std::shared_ptr<data::DataLoader> dataloader;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
};

class Booster {
 public:
  /// mixed_precision: "" / "fp32" (none), "fp16", "bf16" or "auto" (bf16 where this CPU's
  /// bf16 matmul outruns its fp32 one, measured: auto_precision.h); ignored (with a warning)
  /// when the plugin controls precision. split_batch: each of the process's OpenMP threads runs
  /// its own share of every training batch through the model's forward and backward
  /// (nn::split_batch), instead of every op splitting its work over them; the gradients are
  /// the batch's, summed once. Faster where the threads sit in different L3 domains; the
  /// plugin must support it (none, torch_ddp, low_level_zero).
  explicit Booster(std::shared_ptr<Plugin> plugin = nullptr, const std::string& mixed_precision = "",
                   bool split_batch = false);

  /// Wraps and configures the objects; any but the model may be absent.
  template <typename M>
  BoostResult<M> boost(std::shared_ptr<M> model, std::shared_ptr<optim::Optimizer> optimizer = nullptr,
                       Criterion criterion = {}, std::shared_ptr<data::DataLoader> dataloader = nullptr,
                       std::shared_ptr<optim::LRScheduler> lr_scheduler = nullptr) {
    BOOSTER_CHECK(model != nullptr, "Booster.boost: the model is required");
    BoostedObjects o{std::make_shared<ModelWrapper>(std::static_pointer_cast<nn::Module>(model)),
                     optimizer ? std::make_shared<OptimizerLeaf>(std::move(optimizer)) : nullptr,
                     std::move(criterion), std::move(dataloader), std::move(lr_scheduler)};
    configure(o);
    return {BoostedModel<M>(o.model), o.optimizer, o.criterion, o.dataloader, o.lr_scheduler};
  }

  /// loss.backward() through the optimizer chain (which may scale or synchronize).
  void backward(const Tensor& loss, OptimizerWrapper& optimizer) { optimizer.backward(loss); }
  /// Gradient accumulation without synchronization for the scope's lifetime.
  NoSyncScope no_sync(ModelWrapper& model, OptimizerWrapper* optimizer = nullptr);
  /// One pipeline-parallel step; under a plugin without a pipeline (or none) the whole model
  /// runs as one stage on one micro-batch, with the same return: one step path for all.
  PipelineResult execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                  OptimizerWrapper* optimizer = nullptr, bool return_loss = true,
                                  bool return_outputs = false);

  /// The global batch's mean loss, for logging, on every rank: the mean over the ranks that
  /// hold a loss (every rank without a pipeline, the last stage with one; an undefined loss
  /// is held by none), each its replica's mean over equally many rows. The same number under
  /// every plugin and layout. One all-reduce of a scalar over the world.
  double mean_loss(const Tensor& loss) const;
  /// Sums this rank's `totals` (a loss sum, a sample count, a confusion matrix: anything
  /// summed over rows) over the world so that every data-parallel replica's rows count once,
  /// under any dp / tp / pp layout. `held`: this rank holds outputs for its rows (a
  /// pipeline's last stage does, from execute_pipeline; every rank of a whole model does);
  /// the holders of one replica scored the same rows (a tensor-parallel group) and are
  /// counted once. Collective over the world.
  std::vector<double> sum_over_replicas(const std::vector<double>& totals, bool held) const;

  // ---- checkpoints (Colossal-AI's names and defaults; size_per_shard in MB) ----
  void save_model(ModelWrapper& model, const std::string& checkpoint, bool shard = false, const std::string& prefix = "",
                  int64_t size_per_shard = 1024);
  void load_model(ModelWrapper& model, const std::string& checkpoint, bool strict = true);
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint, bool shard = false,
                      const std::string& prefix = "", int64_t size_per_shard = 1024);
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint);
  void save_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint);
  void load_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint);

  Plugin* plugin() const { return plugin_.get(); }
  const std::string& mixed_precision() const { return mixed_precision_; }
  bool split_batch() const { return split_batch_; }
  CheckpointIO& checkpoint_io();

 private:
  void configure(BoostedObjects& o);
  std::shared_ptr<Plugin> plugin_;
  std::string mixed_precision_;
  bool split_batch_ = false;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace booster
