// Trainer (legacy Colossal-AI's colossalai.trainer.Trainer) over the boosted objects: fit()
// runs the epochs, the iterations and the tests, and the hooks do everything else (metrics,
// the lr schedule, logs, TensorBoard, checkpoints), each at its events, ordered by priority.
// One step path under every plugin: each batch goes through booster.execute_pipeline (a
// plugin without a pipeline runs the whole model as one stage), so nothing here asks which
// plugin it runs under. Unlike the legacy Trainer: every hook hears an exception before it
// leaves fit (on_exception); gradient accumulation is counted in iterations and the
// scheduler hook steps once per optimizer step, so an epoch-based schedule advances once an
// epoch whatever the accumulation; clip_grad_norm = 0 means no clipping; metrics are read
// without being changed (metrics.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "booster/booster.h"
#include "booster/trainer/data_layout.h"
#include "booster/trainer/metrics.h"
#include "booster/trainer/timer.h"

namespace booster {

class Trainer;

enum class Mode { train, test };
/// "train" or "test".
const char* mode_name(Mode m);

/// What one iteration produced, as the hooks see it (legacy after_*_iter(output, label, loss)).
struct IterationOutput {
  const TensorMap& batch;    // the processed batch ("labels" under that key)
  const TensorMap& outputs;  // the last stage's outputs; empty elsewhere, or when not returned
  Tensor loss;               // this replica's mean loss over the batch; undefined where not held
  int64_t rows;              // the labels that count (padding and ignore_index excluded): rows of a
                             // classifier's [B] labels, tokens of a language model's [B, T]
};

/// A hook: no-op at every event unless overridden. Lower priority runs first (stable).
class BaseHook {
 public:
  explicit BaseHook(int priority = 0) : priority_(priority) {}
  virtual ~BaseHook() = default;
  int priority() const { return priority_; }
  /// fit() or evaluate() took the hook: add its metrics here (Trainer::add_metric).
  virtual void after_hook_is_attached(Trainer&) {}
  virtual void before_train(Trainer&) {}
  virtual void after_train(Trainer&) {}
  virtual void before_train_epoch(Trainer&) {}
  virtual void after_train_epoch(Trainer&) {}
  virtual void before_train_iter(Trainer&) {}
  virtual void after_train_iter(Trainer&, const IterationOutput&) {}
  virtual void before_test(Trainer&) {}
  virtual void after_test(Trainer&) {}
  virtual void before_test_epoch(Trainer&) {}
  virtual void after_test_epoch(Trainer&) {}
  virtual void before_test_iter(Trainer&) {}
  virtual void after_test_iter(Trainer&, const IterationOutput&) {}
  /// Something threw inside fit() or evaluate() (a step, the data, a hook): every hook hears
  /// it, then the exception leaves. What a hook throws here is logged, not raised.
  virtual void on_exception(Trainer&, const std::exception&) {}

 private:
  int priority_;
};
using Hooks = std::vector<std::shared_ptr<BaseHook>>;

struct TrainerOptions {
  /// > 0: the gradients' global norm is clipped to it before every optimizer step; 0 (the
  /// default): no clipping (the legacy HEAD engine multiplied every gradient by 0 here).
  double clip_grad_norm = 0.0;
  /// K > 1: K iterations of loss / K accumulate gradients (the first K - 1 under
  /// booster.no_sync where the plugin supports it), then one optimizer step. An epoch runs
  /// its batches rounded down to a multiple of K.
  int64_t gradient_accumulation = 1;
  /// Makes the model's named inputs (and "labels") of a loader batch; default: the batch
  /// as it is. Mixup, renaming keys and the like go here.
  std::function<TensorMap(data::Batch&&, Mode)> data_process_func{};
  /// The last stage's outputs reach after_*_iter (test iterations always return them).
  bool return_output_label = true;
};

/// fit()'s arguments, in the legacy order.
struct FitArgs {
  std::shared_ptr<data::DataLoader> train_dataloader{};
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0: stop after this many iterations (at an optimizer step)
  std::shared_ptr<data::DataLoader> test_dataloader{};
  int64_t test_interval = 1;  // test after every test_interval-th epoch
  Hooks hooks{};
  /// A progress bar on rank 0 when stderr is a terminal (else log lines every log_interval).
  bool display_progress = false;
  int64_t log_interval = 0;  // a progress log line every N iterations when no bar is drawn; 0: none
};

class Trainer {
 public:
  Trainer(Booster& booster, std::shared_ptr<ModelWrapper> model, std::shared_ptr<OptimizerWrapper> optimizer,
          StageCriterion criterion, TrainerOptions options = {});
  /// With the loop's criterion(logits, labels), on outputs["logits"] and batch["labels"].
  template <typename M>
  Trainer(Booster& booster, const BoostedModel<M>& model, std::shared_ptr<OptimizerWrapper> optimizer,
          Criterion criterion, TrainerOptions options = {})
      : Trainer(booster, model.wrapper(), std::move(optimizer), on_keys(std::move(criterion)), std::move(options)) {}

  void fit(const FitArgs& args);
  /// One test epoch over the loader with the hooks' test events (the model in eval mode,
  /// no gradients).
  void evaluate(data::DataLoader& test_dataloader, const Hooks& hooks = {}, bool display_progress = false);

  // ---- progress (legacy cur_epoch, cur_step) ----
  int64_t cur_epoch() const { return cur_epoch_; }
  /// Iterations trained so far (with accumulation K, K per optimizer step).
  int64_t cur_step() const { return cur_step_; }
  int64_t epochs() const { return epochs_; }
  /// Iterations an epoch runs (the loader's batches, rounded down to the accumulation).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  /// The iteration fit() will stop after.
  int64_t total_steps() const { return total_steps_; }
  /// Batches of the current epoch consumed.
  int64_t position() const { return position_; }
  /// The latest train iteration ended with an optimizer step.
  bool stepped() const { return stepped_; }
  /// Resuming: the next iteration is batch `position` of `epoch`, with `step` iterations
  /// done (a checkpoint hook calls it in before_train).
  void set_progress(int64_t epoch, int64_t step, int64_t position);
  bool resumed() const { return resumed_; }
  /// How fit() lays its batches out: replicas, the loader's batch, the accumulation, the
  /// loader's dataset and the optimizer steps an epoch (set when fit() starts).
  const DataLayout& data_layout() const { return layout_; }
  /// Optimizer steps done, and the samples of the current epoch consumed over all replicas.
  int64_t optimizer_steps() const { return cur_step_ / options_.gradient_accumulation; }
  int64_t epoch_samples() const { return position_ * layout_.dp_size * layout_.batch_size; }

  // ---- the objects ----
  Booster& booster() const { return booster_; }
  ModelWrapper& model() const { return *model_; }
  OptimizerWrapper* optimizer() const { return optimizer_.get(); }
  /// The data-parallel size: how many replicas each see their own rows.
  int dp_size() const;

  // ---- states (legacy trainer.states) ----
  MultiTimer& timer() { return timer_; }
  /// Registers a metric (a second metric under one name is refused).
  void add_metric(Mode mode, const std::string& name, std::shared_ptr<Metric> metric);
  /// The metrics of a mode, by name.
  const std::map<std::string, std::shared_ptr<Metric>>& metrics(Mode mode) const;
  /// A metric by name: a ValueError naming the metrics there are when absent.
  Metric& metric(Mode mode, const std::string& name) const;
  bool has_metric(Mode mode, const std::string& name) const;
  /// The latest step's values for the progress bar (LogMetricByStepHook fills it).
  std::map<std::string, double>& step_metrics(Mode mode) { return step_metrics_[int(mode)]; }
  /// Named numbers that live as long as the run (best accuracy, ...): checkpoints keep them.
  std::map<std::string, double>& records() { return records_; }

 private:
  friend class TrainerLoop;
  Booster& booster_;
  std::shared_ptr<ModelWrapper> model_;
  std::shared_ptr<OptimizerWrapper> optimizer_;
  StageCriterion criterion_;
  TrainerOptions options_;
  MultiTimer timer_;
  std::map<std::string, std::shared_ptr<Metric>> metrics_[2];
  std::map<std::string, double> step_metrics_[2], records_;
  int64_t cur_epoch_ = 0, cur_step_ = 0, epochs_ = 0, steps_per_epoch_ = 0, total_steps_ = 0, position_ = 0;
  DataLayout layout_;
  bool stepped_ = false, resumed_ = false;
};

}  // namespace booster
