// The shared loss-scaling and clipping step rule (see loss_scaling.h).
#include "booster/loss_scaling.h"

#include <spdlog/spdlog.h>

#include "core/kernels/ops.h"

namespace booster {

LossScaling::LossScaling(std::string precision, GradScalerOptions scaler, bool skip_nonfinite)
    : precision_(std::move(precision)), fp16_(precision_ == "fp16"), skip_nonfinite_(skip_nonfinite), scaler_(scaler) {}

Tensor LossScaling::scale_loss(const Tensor& t) const { return fp16_ ? scale(t, scaler_.scale()) : t; }

void LossScaling::set_clip(double norm, double max_norm) {
  grad_norm_ = norm;
  pending_max_norm_ = max_norm;
}

bool LossScaling::begin_step(bool nonfinite_anywhere) {
  ++steps_;
  last_skipped_ = nonfinite_anywhere;
  if (!last_skipped_) return true;
  ++skipped_;
  pending_max_norm_ = 0;
  if (fp16_) {
    scaler_.update(true);
    spdlog::warn("step {}: non-finite gradient, step skipped; loss scale now {}", steps_, scaler_.scale());
  } else {
    BOOSTER_CHECK(skip_nonfinite_, precision_, " step ", steps_, ": a gradient is non-finite (inf or NaN) on some rank");
    spdlog::warn("step {}: non-finite gradient under {}, step skipped", steps_, precision_);
  }
  return false;
}

double LossScaling::take_divisor() {
  double div = loss_scale();
  if (pending_max_norm_ > 0 && grad_norm_) {
    const double clip = (*grad_norm_ + 1e-6) / pending_max_norm_;
    if (clip > 1) div *= clip;
  }
  pending_max_norm_ = 0;
  return div;
}

void LossScaling::end_step() {
  if (fp16_) scaler_.update(false);
}

void LossScaling::save(std::map<std::string, double>& extra) const {
  if (!fp16_) return;
  extra["loss_scale"] = scaler_.scale();
  extra["growth_step"] = double(scaler_.growth_step());
  extra["hysteresis_step"] = double(scaler_.hysteresis_step());
}

void LossScaling::load(const std::map<std::string, double>& extra) {
  if (fp16_ && extra.count("loss_scale"))
    scaler_.set_state(extra.at("loss_scale"), int64_t(extra.count("growth_step") ? extra.at("growth_step") : 0),
                      int64_t(extra.count("hysteresis_step") ? extra.at("hysteresis_step") : 0));
}

}  // namespace booster
