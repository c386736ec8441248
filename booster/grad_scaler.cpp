// DynamicGradScaler (see grad_scaler.h).
#include "booster/grad_scaler.h"

#include <algorithm>

#include "core/common/check.h"

namespace booster {

void GradScalerOptions::validate(const char* who) const {
  BOOSTER_CHECK(initial_scale > 0, who, "initial_scale must be positive, got ", initial_scale);
  BOOSTER_CHECK(min_scale > 0, who, "min_scale must be positive, got ", min_scale);
  BOOSTER_CHECK(max_scale >= min_scale, who, "max_scale (", max_scale, ") must be >= min_scale (", min_scale, ")");
  BOOSTER_CHECK(growth_factor > 1, who, "growth_factor must be > 1, got ", growth_factor);
  BOOSTER_CHECK(backoff_factor > 0 && backoff_factor < 1, who, "backoff_factor must be in (0, 1), got ", backoff_factor);
  BOOSTER_CHECK(growth_interval > 0, who, "growth_interval must be positive, got ", growth_interval);
  BOOSTER_CHECK(hysteresis > 0, who, "hysteresis must be positive, got ", hysteresis);
}

DynamicGradScaler::DynamicGradScaler(GradScalerOptions o) : o_(o), scale_(o.initial_scale) {
  BOOSTER_CHECK(o.min_scale > 0 && o.initial_scale >= o.min_scale && o.max_scale >= o.initial_scale,
                "DynamicGradScaler: need 0 < min_scale <= initial_scale <= max_scale");
  BOOSTER_CHECK(o.growth_factor > 1, "DynamicGradScaler: growth_factor must be > 1, got ", o.growth_factor);
  BOOSTER_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "DynamicGradScaler: backoff_factor must be in (0, 1)");
  BOOSTER_CHECK(o.growth_interval > 0 && o.hysteresis >= 1, "DynamicGradScaler: growth_interval and hysteresis must be >= 1");
}

void DynamicGradScaler::update(bool overflow) {
  if (overflow) {
    ++hysteresis_step_;
    growth_step_ = 0;
    if (hysteresis_step_ >= o_.hysteresis) scale_ = std::max(scale_ * o_.backoff_factor, o_.min_scale);
  } else {
    ++growth_step_;
    if (growth_step_ == o_.growth_interval) {
      growth_step_ = 0;
      hysteresis_step_ = 0;
      scale_ = std::min(scale_ * o_.growth_factor, o_.max_scale);
    }
  }
}

void DynamicGradScaler::set_state(double scale, int64_t growth_step, int64_t hysteresis_step) {
  scale_ = scale;
  growth_step_ = growth_step;
  hysteresis_step_ = hysteresis_step;
}

}  // namespace booster
