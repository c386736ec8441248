// DynamicGradScaler with Colossal-AI's options, defaults and update rule: an overflow
// counts toward hysteresis and resets growth; after `hysteresis` overflows every further
// overflow backs the scale off (the hysteresis counter is reset only when the scale
// grows); growth_interval clean steps in a row grow it.
#pragma once

#include <cstdint>

namespace booster {

struct GradScalerOptions {
  double initial_scale = 65536.0;  // 2**16
  double min_scale = 1.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
  double max_scale = 4294967296.0;  // 2**32
  /// Throws ValueError, prefixed by `who`, naming the first argument out of range.
  void validate(const char* who) const;
};

class DynamicGradScaler {
 public:
  explicit DynamicGradScaler(GradScalerOptions o = {});
  double scale() const { return scale_; }
  /// Records one step's outcome.
  void update(bool overflow);
  int64_t growth_step() const { return growth_step_; }
  int64_t hysteresis_step() const { return hysteresis_step_; }
  /// Restores (scale, growth counter, hysteresis counter).
  void set_state(double scale, int64_t growth_step, int64_t hysteresis_step);
  const GradScalerOptions& options() const { return o_; }

 private:
  GradScalerOptions o_;
  double scale_;
  int64_t growth_step_ = 0, hysteresis_step_ = 0;
};

}  // namespace booster
