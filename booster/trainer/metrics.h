// The Trainer's metrics (legacy Colossal-AI's trainer/hooks/_metric_hook.py), made safe to
// read: a value is combined over the ranks once, at a fixed point every rank reaches (a
// per-step metric when it is updated, an epoch metric when the Trainer syncs the mode
// before after_*_epoch), and reading it is pure. The legacy metrics all-reduce, and
// LossMetric divides in place, on every read, so two hooks reading one value disagree and
// a hook that reads on one rank only hangs the others.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "booster/booster.h"

namespace booster {

class Metric {
 public:
  explicit Metric(bool epoch_only) : epoch_only_(epoch_only) {}
  virtual ~Metric() = default;
  /// Kept for the epoch only (reported once an epoch), or also per step.
  bool epoch_only() const { return epoch_only_; }
  /// Starts a new epoch's accumulation.
  virtual void reset() = 0;
  /// Combines what every rank recorded since reset() (collective over the world: every rank
  /// calls it at the same point). The Trainer calls it before after_train_epoch and
  /// after_test_epoch.
  virtual void sync(const Booster&) {}
  /// The latest step's value, the same on every rank (NaN before any).
  virtual double last_step_value() const = 0;
  /// The value over the epoch so far (an epoch metric's after sync()).
  virtual double accumulated_value() const = 0;
  /// Whether a is better than b (legacy is_better: lower loss, higher accuracy).
  virtual bool is_better(double a, double b) const { return a > b; }

 private:
  bool epoch_only_;
};

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

/// The mean loss. Per step (train): the global batch's mean, on every rank
/// (Booster::mean_loss, one scalar all-reduce a step), averaged over the epoch. Epoch only
/// (test): each row counted once under any dp / tp / pp layout (Booster::sum_over_replicas).
class LossMetric : public Metric {
 public:
  explicit LossMetric(bool epoch_only) : Metric(epoch_only) {}
  void reset() override;
  /// `loss`: this rank's mean over its `rows` counted rows (undefined where not held).
  /// Collective when per step.
  void update(const Tensor& loss, int64_t rows, const Booster& booster);
  void sync(const Booster& booster) override;
  double last_step_value() const override { return last_; }
  double accumulated_value() const override;
  bool is_better(double a, double b) const override { return a < b; }
  /// Rows counted in the epoch (an epoch metric's, after sync).
  int64_t samples() const { return samples_; }

 private:
  double last_ = kNoValue, step_sum_ = 0, local_sum_ = 0, value_ = kNoValue;
  int64_t steps_ = 0, local_rows_ = 0, samples_ = 0;
  bool held_ = false;
};

/// A language model's perplexity: exp of the mean token loss, combined as LossMetric
/// combines it (per step: exp of the global batch's mean; per epoch: exp of the mean over
/// every counted token once).
class PerplexityMetric : public LossMetric {
 public:
  using LossMetric::LossMetric;
  double last_step_value() const override { return std::exp(LossMetric::last_step_value()); }
  double accumulated_value() const override { return std::exp(LossMetric::accumulated_value()); }
};

/// Correct predictions over counted rows (padding, labels < 0, excluded). With num_classes
/// it also keeps the confusion matrix [true][predicted] of the argmax predictions.
class AccuracyMetric : public Metric {
 public:
  /// Number of rows of `logits` whose prediction matches `labels` (legacy accuracy_func).
  using AccuracyFunc = std::function<int64_t(const Tensor& logits, const Tensor& labels)>;
  AccuracyMetric(bool epoch_only, AccuracyFunc accuracy_func = nullptr, int64_t num_classes = 0);
  void reset() override;
  /// Local; `logits` undefined where this rank holds no outputs.
  void update(const Tensor& logits, const Tensor& labels);
  void sync(const Booster& booster) override;
  double last_step_value() const override { return last_; }
  double accumulated_value() const override;
  int64_t samples() const { return total_; }
  /// [true][predicted] counts over the epoch (after sync; empty without num_classes).
  const std::vector<std::vector<int64_t>>& confusion() const { return confusion_; }
  /// Per class: correct / rows of that class (0 for a class with no rows).
  std::vector<double> per_class_accuracy() const;

 private:
  AccuracyFunc func_;
  int64_t classes_;
  std::vector<double> local_;  // [correct, total, confusion...]
  std::vector<std::vector<int64_t>> confusion_;
  int64_t correct_ = 0, total_ = 0;
  double last_ = kNoValue;
  bool held_ = false;
};

/// The learning rate of the latest step.
class LearningRateMetric : public Metric {
 public:
  explicit LearningRateMetric(bool epoch_only = false, double initial_lr = 0.0) : Metric(epoch_only), lr_(initial_lr) {}
  void reset() override {}
  void update(double lr) { lr_ = lr; }
  double last_step_value() const override { return lr_; }
  double accumulated_value() const override { return lr_; }

 private:
  double lr_;
};

/// Samples per second over the data-parallel replicas: a step's global rows over its wall
/// time; accumulated, all rows over all time after the epoch's first `ignored_steps` steps
/// (reset() starts the count again: each epoch skips its own warm-up, where the legacy
/// metric kept its step count across resets). With tflop_per_step, also TFLOP/s.
class ThroughputMetric : public Metric {
 public:
  ThroughputMetric(bool epoch_only, int64_t ignored_steps = 0, double tflop_per_step = 0)
      : Metric(epoch_only), ignored_(ignored_steps), tflop_(tflop_per_step) {}
  void reset() override;
  void update(int64_t global_rows, double seconds);
  double last_step_value() const override { return last_; }
  double accumulated_value() const override;
  /// TFLOP/s over the counted steps (0 without tflop_per_step).
  double tflops() const;

 private:
  int64_t ignored_, steps_ = 0, counted_ = 0;
  double tflop_, rows_ = 0, seconds_ = 0, last_ = kNoValue;
};

}  // namespace booster
