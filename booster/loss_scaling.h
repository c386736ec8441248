// The step rule every precision owner shares (Booster's mixed precision, ZeRO, Gemini, as
// Colossal-AI's MixedPrecisionOptimizer and its ZeRO optimizers do): fp16 scales the loss
// by a DynamicGradScaler; a non-finite gradient on any rank skips the step on every rank
// (fp16: and backs the scale off; bf16: warned and skipped, or raised); unscaling and
// clipping fold into one divisor of the fused update: div = scale, times
// (norm + 1e-6) / max_norm when that exceeds 1.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "booster/grad_scaler.h"
#include "core/tensor/tensor.h"

namespace booster {

class LossScaling {
 public:
  /// precision: "fp16", "bf16" or "fp32" (bf16 and fp32 never scale).
  LossScaling(std::string precision, GradScalerOptions scaler = {}, bool skip_nonfinite = true);

  bool fp16() const { return fp16_; }
  double loss_scale() const { return fp16_ ? scaler_.scale() : 1.0; }
  /// loss (or a gradient fed to backward) times the loss scale under fp16.
  Tensor scale_loss(const Tensor& t) const;
  /// Records a clip for the next step: `norm` is the unscaled global norm.
  void set_clip(double norm, double max_norm);
  std::optional<double> grad_norm() const { return grad_norm_; }

  /// Starts a step given whether any rank saw a non-finite gradient: false means skip it
  /// (the scaler backs off; bf16 warns, or raises when skip_nonfinite is off).
  bool begin_step(bool nonfinite_anywhere);
  /// This step's gradient divisor (loss scale and pending clip); clears the clip.
  double take_divisor();
  /// Ends a step that ran (fp16: one more clean step for the scaler).
  void end_step();

  /// Scaler state for checkpoints (fp16 only: the other precisions record none).
  void save(std::map<std::string, double>& extra) const;
  void load(const std::map<std::string, double>& extra);

  const DynamicGradScaler& scaler() const { return scaler_; }
  bool last_step_skipped() const { return last_skipped_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  std::string precision_;
  bool fp16_, skip_nonfinite_;
  DynamicGradScaler scaler_;
  std::optional<double> grad_norm_;
  double pending_max_norm_ = 0;
  bool last_skipped_ = false;
  int64_t skipped_ = 0, steps_ = 0;
};

}  // namespace booster
