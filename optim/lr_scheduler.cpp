// Scheduler formulas (see lr_scheduler.h).
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace booster::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer) {
  for (auto& g : opt_.param_groups()) base_lrs_.push_back(g.lr());
}

void LRScheduler::init() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::apply() {
  last_lr_.clear();
  auto& groups = opt_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double lr = lr_at(i, last_epoch_);
    groups[i].lr() = lr;
    last_lr_.push_back(lr);
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::load_state_dict(const SchedulerState& s) {
  BOOSTER_CHECK(s.type.empty() || s.type == type_name(), "load_state_dict: state of a ", s.type, " given to a ",
                type_name());
  BOOSTER_CHECK(s.base_lrs.size() == base_lrs_.size(), "load_state_dict: ", s.base_lrs.size(),
                " base learning rates saved for ", base_lrs_.size(), " parameter groups");
  base_lrs_ = s.base_lrs;
  last_epoch_ = s.last_epoch;
  if (last_epoch_ >= 0) apply();
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  BOOSTER_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  init();
}

double CosineAnnealingLR::lr_at(size_t g, int64_t e) const {
  return eta_min_ + (base_lrs_[g] - eta_min_) * (1 + std::cos(M_PI * double(e) / double(t_max_))) / 2;
}

CosineAnnealingWarmupLR::CosineAnnealingWarmupLR(Optimizer& opt, int64_t total_steps, int64_t warmup_steps,
                                                 double eta_min)
    : LRScheduler(opt), total_(total_steps), warmup_(warmup_steps), eta_min_(eta_min) {
  BOOSTER_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, "CosineAnnealingWarmupLR: need 0 <= warmup_steps (",
                warmup_steps, ") < total_steps (", total_steps, ")");
  init();
}

double CosineAnnealingWarmupLR::lr_at(size_t g, int64_t e) const {
  if (e < warmup_) return double(e + 1) / double(warmup_) * base_lrs_[g];
  const double t = double(e - warmup_), T = double(total_ - warmup_);
  return eta_min_ + (base_lrs_[g] - eta_min_) * (1 + std::cos(M_PI * t / T)) / 2;
}

LinearWarmupLR::LinearWarmupLR(Optimizer& opt, int64_t total_steps, int64_t warmup_steps)
    : LRScheduler(opt), total_(total_steps), warmup_(warmup_steps) {
  BOOSTER_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, "LinearWarmupLR: need 0 <= warmup_steps (",
                warmup_steps, ") < total_steps (", total_steps, ")");
  init();
}

double LinearWarmupLR::lr_at(size_t g, int64_t e) const {
  if (e < warmup_) return double(e + 1) / double(warmup_ + 1) * base_lrs_[g];
  return double(total_ - e) / double(total_ - warmup_) * base_lrs_[g];
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  init();
}

double MultiStepLR::lr_at(size_t g, int64_t e) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin();
  return base_lrs_[g] * std::pow(gamma_, double(passed));
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) { init(); }

double ExponentialLR::lr_at(size_t g, int64_t e) const { return base_lrs_[g] * std::pow(gamma_, double(e)); }

OneCycleLR::OneCycleLR(Optimizer& opt, int64_t total_steps, Options o) : LRScheduler(opt), total_(total_steps), o_(o) {
  BOOSTER_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  BOOSTER_CHECK(o.pct_start > 0 && o.pct_start < 1, "OneCycleLR: pct_start must be in (0, 1), got ", o.pct_start);
  BOOSTER_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
                "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"", o.anneal_strategy, "\"");
  init();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (o_.anneal_strategy == "linear") return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
}

double OneCycleLR::lr_at(size_t g, int64_t e) const {
  BOOSTER_CHECK(e <= total_, "OneCycleLR: tried to step ", e, " times; the specified number of total steps is ", total_);
  const double max_lr = base_lrs_[g], initial = max_lr / o_.div_factor, min_lr = initial / o_.final_div_factor;
  const double end1 = o_.pct_start * double(total_) - 1, end2 = double(total_) - 1;
  double lr, mom;
  if (double(e) <= end1) {
    const double pct = double(e) / end1;
    lr = anneal(initial, max_lr, pct);
    mom = anneal(o_.max_momentum, o_.base_momentum, pct);
  } else {
    const double pct = (double(e) - end1) / (end2 - end1);
    lr = anneal(max_lr, min_lr, pct);
    mom = anneal(o_.base_momentum, o_.max_momentum, pct);
  }
  if (o_.cycle_momentum) {
    auto& opts = opt_.param_groups()[g].options;
    if (opts.count("beta1")) opts["beta1"] = mom;
    else if (opts.count("momentum")) opts["momentum"] = mom;
  }
  return lr;
}

}  // namespace booster::optim
