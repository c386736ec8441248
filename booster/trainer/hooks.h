// The built-in hooks, under legacy Colossal-AI's names and defaults
// (colossalai/trainer/hooks): the metric hooks record into the Trainer's metrics, the log
// hooks report them. SaveCheckpointHook is in checkpoint_hook.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "booster/summary_writer.h"
#include "booster/trainer/trainer.h"

namespace booster {

/// train "Loss" per step (the global batch's mean), test "Loss" per epoch (every row once;
/// a language model's: every counted token once, the mean token loss).
class LossHook : public BaseHook {
 public:
  explicit LossHook(int priority = 0) : BaseHook(priority) {}
  void after_hook_is_attached(Trainer& t) override;
  void before_train_epoch(Trainer& t) override;
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void before_test_epoch(Trainer& t) override;
  void after_test_iter(Trainer& t, const IterationOutput& out) override;

 protected:
  /// A hook recording `name` with PerplexityMetric (perplexity) or LossMetric.
  LossHook(int priority, std::string name, bool perplexity) : BaseHook(priority), name_(std::move(name)), exp_(perplexity) {}

 private:
  std::string name_ = "Loss";
  bool exp_ = false;
  std::shared_ptr<LossMetric> train_, test_;
};

/// train and test "Perplexity" (exp of the mean token loss), kept as LossHook keeps "Loss".
class PerplexityHook : public LossHook {
 public:
  explicit PerplexityHook(int priority = 0) : LossHook(priority, "Perplexity", true) {}
};

/// test "Accuracy" per epoch from outputs[output_key] and batch[label_key]; with
/// num_classes also the confusion matrix (AccuracyMetric).
class AccuracyHook : public BaseHook {
 public:
  explicit AccuracyHook(AccuracyMetric::AccuracyFunc accuracy_func = nullptr, int priority = 0, int64_t num_classes = 0,
                        std::string output_key = "logits", std::string label_key = "labels");
  void after_hook_is_attached(Trainer& t) override;
  void before_test(Trainer& t) override;
  void after_test_iter(Trainer& t, const IterationOutput& out) override;
  /// The metric of the last fit or evaluate this hook was attached to.
  const AccuracyMetric& metric() const {
    BOOSTER_CHECK(metric_ != nullptr, "AccuracyHook: not attached to a Trainer yet");
    return *metric_;
  }

 private:
  AccuracyMetric::AccuracyFunc func_;
  int64_t classes_;
  std::string output_key_, label_key_;
  std::shared_ptr<AccuracyMetric> metric_;
};

/// Steps the scheduler once per optimizer step (by_epoch = false) or once per whole epoch,
/// whatever the gradient accumulation; train "LR" holds the rate after the step.
class LRSchedulerHook : public BaseHook {
 public:
  LRSchedulerHook(std::shared_ptr<optim::LRScheduler> lr_scheduler, bool by_epoch, bool store_lr_in_state = true,
                  int priority = 1);
  void after_hook_is_attached(Trainer& t) override;
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void after_train_epoch(Trainer& t) override;
  const std::shared_ptr<optim::LRScheduler>& lr_scheduler() const { return scheduler_; }

 private:
  double lr() const;
  std::shared_ptr<optim::LRScheduler> scheduler_;
  bool by_epoch_, store_;
  std::shared_ptr<LearningRateMetric> metric_;
};

/// train and test "Throughput": rows per second over the replicas (use_local: this rank's
/// rows), from the Trainer's own step timers (the legacy hook needed a timer passed in).
class ThroughputHook : public BaseHook {
 public:
  explicit ThroughputHook(int64_t ignored_steps = 0, int priority = 10, double tflop_per_step = 0, bool use_local = false)
      : BaseHook(priority), ignored_(ignored_steps), tflop_(tflop_per_step), local_(use_local) {}
  void after_hook_is_attached(Trainer& t) override;
  void before_train_epoch(Trainer& t) override;
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void before_test(Trainer& t) override;
  void after_test_iter(Trainer& t, const IterationOutput& out) override;

 private:
  int64_t ignored_;
  double tflop_;
  bool local_;
  std::shared_ptr<ThroughputMetric> train_, test_;
};

/// Copies each step's per-step metrics to the Trainer's step_metrics (the progress bar's).
/// Priority 100 by default (the legacy 10 ran before or after ThroughputHook's 10 by the
/// order of the hook list): after every metric hook of the iteration.
class LogMetricByStepHook : public BaseHook {
 public:
  explicit LogMetricByStepHook(int priority = 100) : BaseHook(priority) {}
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void after_test_iter(Trainer& t, const IterationOutput& out) override;
};

/// Logs every interval-th epoch: "[Epoch 2 / Train]: Loss = 0.4321 | LR = 1.000e-03".
class LogMetricByEpochHook : public BaseHook {
 public:
  explicit LogMetricByEpochHook(int64_t interval = 1, int priority = 10) : BaseHook(priority), interval_(interval) {}
  void after_train_epoch(Trainer& t) override;
  void after_test_epoch(Trainer& t) override;

 private:
  int64_t interval_;
};

/// TensorBoard events under log_dir/rank_<r> for each rank r of `ranks`: per-step metrics
/// every iteration, epoch metrics every epoch, tagged "<Name>/<mode>", at the iteration.
class TensorboardHook : public BaseHook {
 public:
  explicit TensorboardHook(std::string log_dir, std::vector<int> ranks = {0}, int priority = 10);
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void after_train_epoch(Trainer& t) override;
  void after_test_iter(Trainer& t, const IterationOutput& out) override;
  void after_test_epoch(Trainer& t) override;
  void on_exception(Trainer& t, const std::exception& e) override;

 private:
  void write(Trainer& t, Mode mode, bool epoch_only);
  std::unique_ptr<SummaryWriter> writer_;
};

/// Logs each timer's last and mean interval every interval-th epoch (the train step's mean
/// past its first ignore_num_train_steps).
class LogTimingByEpochHook : public BaseHook {
 public:
  explicit LogTimingByEpochHook(int64_t interval = 1, int priority = 10, bool log_eval = true,
                                int64_t ignore_num_train_steps = 0)
      : BaseHook(priority), interval_(interval), log_eval_(log_eval), ignore_(ignore_num_train_steps) {}
  void after_train_epoch(Trainer& t) override;
  void after_test_epoch(Trainer& t) override;

 private:
  void log(Trainer& t, Mode mode);
  int64_t interval_;
  bool log_eval_;
  int64_t ignore_;
};

/// Logs the memory tiers' use and peak (the largest over the ranks) since the last report,
/// and with report_cpu the process's resident set: before training, after every
/// interval-th epoch and after each test (log_eval).
class LogMemoryByEpochHook : public BaseHook {
 public:
  explicit LogMemoryByEpochHook(int64_t interval = 1, int priority = 10, bool log_eval = true, bool report_cpu = false)
      : BaseHook(priority), interval_(interval), log_eval_(log_eval), cpu_(report_cpu) {}
  void before_train(Trainer& t) override;
  void after_train_epoch(Trainer& t) override;
  void after_test(Trainer& t) override;

 private:
  void report(const std::string& when);
  int64_t interval_;
  bool log_eval_, cpu_;
};

}  // namespace booster
