// Learning-rate schedulers with Colossal-AI's names and semantics, stepped once per
// iteration. Construction applies step 0 (as PyTorch's last_epoch = -1 start does).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace booster::optim {

/// A serializable scheduler snapshot.
struct SchedulerState {
  std::string type;
  int64_t last_epoch = -1;
  std::vector<double> base_lrs;
};

/// Base: subclasses give the learning rate of each group at an epoch.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  /// Advances one iteration and writes the new rates into the optimizer's groups.
  void step();
  /// The rates of the last step.
  std::vector<double> get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  virtual std::string type_name() const = 0;
  SchedulerState state_dict() const { return {type_name(), last_epoch_, base_lrs_}; }
  /// Restores a snapshot and rewrites the optimizer's rates for that epoch.
  void load_state_dict(const SchedulerState& s);

 protected:
  /// Rate of group i at epoch e (e >= 0).
  virtual double lr_at(size_t group, int64_t epoch) const = 0;
  /// Call at the end of a subclass constructor: applies epoch 0.
  void init();
  Optimizer& opt_;
  std::vector<double> base_lrs_;

 private:
  void apply();
  int64_t last_epoch_ = -1;
  std::vector<double> last_lr_;
};

/// eta_min + (base - eta_min) (1 + cos(pi e / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  std::string type_name() const override { return "CosineAnnealingLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  int64_t t_max_;
  double eta_min_;
};

/// Colossal-AI: warm-up (e + 1) / warmup base for e < warmup, then cosine annealing over
/// total_steps - warmup_steps down to eta_min.
class CosineAnnealingWarmupLR : public LRScheduler {
 public:
  CosineAnnealingWarmupLR(Optimizer& opt, int64_t total_steps, int64_t warmup_steps = 0, double eta_min = 0.0);
  std::string type_name() const override { return "CosineAnnealingWarmupLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  int64_t total_, warmup_;
  double eta_min_;
};

/// Colossal-AI: (e + 1) / (warmup + 1) base during warm-up, then linear decay
/// (total - e) / (total - warmup) base.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& opt, int64_t total_steps, int64_t warmup_steps = 0);
  std::string type_name() const override { return "LinearWarmupLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  int64_t total_, warmup_;
};

/// base gamma^(number of milestones <= e).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string type_name() const override { return "MultiStepLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// base gamma^e.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  std::string type_name() const override { return "ExponentialLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  double gamma_;
};

/// PyTorch's OneCycleLR (two phases, max_lr = each group's lr as Colossal-AI uses it):
/// from max_lr / div_factor up to max_lr over pct_start of the steps, then down to
/// initial / final_div_factor; "cos" or "linear" annealing. With cycle_momentum, beta1 (or
/// momentum) cycles inversely between max_momentum and base_momentum.
class OneCycleLR : public LRScheduler {
 public:
  struct Options {
    double pct_start = 0.3;
    std::string anneal_strategy = "cos";
    bool cycle_momentum = true;
    double base_momentum = 0.85, max_momentum = 0.95;
    double div_factor = 25.0, final_div_factor = 1e4;
  };
  OneCycleLR(Optimizer& opt, int64_t total_steps, Options o);
  OneCycleLR(Optimizer& opt, int64_t total_steps) : OneCycleLR(opt, total_steps, Options{}) {}
  std::string type_name() const override { return "OneCycleLR"; }

 protected:
  double lr_at(size_t g, int64_t e) const override;
  /// Value between `start` and `end` at fraction pct of a phase.
  double anneal(double start, double end, double pct) const;
  int64_t total_;
  Options o_;
};

}  // namespace booster::optim
