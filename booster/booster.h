// Booster (mirrors colossalai.booster.Booster): boost() hands the user's five objects to
// the plugin, which wraps them; what the plugin produced is what boost() returns. backward,
// no_sync, execute_pipeline and the checkpoint calls forward to the plugin. Booster never
// asks which plugin it holds.
#pragma once

#include <memory>
#include <optional>
#include <vector>
#include <string>

#include "booster/checkpoint_io.h"
#include "booster/grad_sync.h"
#include "booster/plugin.h"
#include "nn/lora.h"

namespace booster {

/// What Booster::enable_lora takes (Colossal-AI's arguments): the adapters' settings, or a
/// folder PEFT's save_pretrained (or save_lora_as_pretrained) wrote to continue from.
struct LoraOptions {
  std::string pretrained_dir;                   // adapter_config.json + adapter_model.safetensors
  std::optional<nn::LoraConfig> lora_config;    // required without pretrained_dir
  std::string bnb_quantization_config;          // QLoRA: refused (no 4-bit kernels here)
  bool quantize = false;                        // QLoRA: refused
};

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

  /// Colossal-AI's enable_lora, before boost(): wraps the model's target layers in LoRA
  /// adapters in place (nn::inject_lora), freezing the rest; with pretrained_dir the saved
  /// adapters (and their config) are loaded to train on. Build the optimizer afterwards,
  /// over nn::trainable_parameters(*model). Refused after boost, twice, or with QLoRA.
  template <typename M>
  std::shared_ptr<M> enable_lora(std::shared_ptr<M> model, const LoraOptions& options) {
    BOOSTER_CHECK(model != nullptr, "Booster.enable_lora: the model is required");
    enable_lora_on(*model, options);
    return model;
  }
  /// enable_lora(model, lora_config=...).
  template <typename M>
  std::shared_ptr<M> enable_lora(std::shared_ptr<M> model, const nn::LoraConfig& lora_config) {
    LoraOptions o;
    o.lora_config = lora_config;
    return enable_lora(std::move(model), o);
  }
  /// enable_lora(model, pretrained_dir=...): continues from saved adapters.
  template <typename M>
  std::shared_ptr<M> enable_lora(std::shared_ptr<M> model, const std::string& pretrained_dir) {
    LoraOptions o;
    o.pretrained_dir = pretrained_dir;
    return enable_lora(std::move(model), o);
  }
  /// Colossal-AI's save_lora_as_pretrained: PEFT's folder (adapter_config.json,
  /// adapter_model.safetensors under PEFT's names) from a model in any layout; collective.
  void save_lora_as_pretrained(ModelWrapper& model, const std::string& checkpoint);
  /// What enable_lora did (null without it).
  const nn::LoraState* lora_state() const { return lora_ ? &*lora_ : nullptr; }

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
  /// use_async: the state is copied before it returns and written behind while training
  /// goes on; checkpoint_io().synchronize() waits for it (and raises its error), as does the
  /// next save or load, and the program before it exits.
  void save_model(ModelWrapper& model, const std::string& checkpoint, bool shard = false, const std::string& prefix = "",
                  int64_t size_per_shard = 1024, bool use_async = false);
  void load_model(ModelWrapper& model, const std::string& checkpoint, bool strict = true);
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint, bool shard = false,
                      const std::string& prefix = "", int64_t size_per_shard = 1024, bool use_async = false);
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint);
  void save_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint);
  void load_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint);

  Plugin* plugin() const { return plugin_.get(); }
  const std::string& mixed_precision() const { return mixed_precision_; }
  bool split_batch() const { return split_batch_; }
  CheckpointIO& checkpoint_io();

 private:
  void configure(BoostedObjects& o);
  void enable_lora_on(nn::Module& model, const LoraOptions& options);
  std::shared_ptr<Plugin> plugin_;
  std::optional<nn::LoraState> lora_;
  std::vector<const nn::Module*> boosted_;  // the modules boost() configured
  std::string mixed_precision_;
  bool split_batch_ = false;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace booster
