// The one mixed-precision layer (Booster's mixed_precision and plugins' precision option
// both go through it): parameters become bf16/fp16 compute copies (same handles), the
// optimizer updates fp32 masters, and the copies are refreshed after each step. fp16
// scales the loss with a DynamicGradScaler; unscaling and clipping happen in one pass
// (div = scale, times the clip factor when it exceeds 1) as Colossal-AI's
// MixedPrecisionOptimizer does. A non-finite gradient on any rank skips the step on every
// rank (fp16: and backs the scale off); under bf16 it is reported, and skipped or raised.
#pragma once

#include <string>

#include "booster/grad_scaler.h"
#include "booster/plugin.h"

namespace booster {

struct MixedPrecisionOptions {
  std::string precision = "bf16";  // "bf16" or "fp16"
  GradScalerOptions scaler;        // fp16 only
  bool skip_nonfinite = true;      // bf16: skip the step (true) or stop with an error (false)
};

class MixedPrecisionOptimizer : public OptimizerWrapper {
 public:
  /// Wraps the plugin's optimizer wrapper; masters must already be registered.
  MixedPrecisionOptimizer(std::shared_ptr<OptimizerWrapper> inner, std::vector<std::pair<Tensor, Tensor>> param_master,
                          MixedPrecisionOptions opts);
  void backward(const Tensor& loss, bool retain_graph = false) override;
  void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false) override;
  void step() override;
  void zero_grad(bool set_to_none = true) override { inner_->zero_grad(set_to_none); }
  /// Returns the unscaled global norm; the clip itself is applied by the next step().
  double clip_grad_by_norm(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false) override;
  void clip_grad_by_value(double clip_value) override;
  optim::OptimizerStateDict state_dict() const override;
  void load_state_dict(const optim::OptimizerStateDict& sd) override;

  double loss_scale() const { return fp16_ ? scaler_.scale() : 1.0; }
  const DynamicGradScaler& scaler() const { return scaler_; }
  bool last_step_skipped() const { return last_skipped_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  bool found_nonfinite_on_any_rank();
  std::shared_ptr<OptimizerWrapper> inner_;
  std::vector<std::pair<Tensor, Tensor>> param_master_;
  MixedPrecisionOptions opts_;
  bool fp16_;
  DynamicGradScaler scaler_;
  double pending_max_norm_ = 0;
  bool last_skipped_ = false;
  int64_t skipped_ = 0, steps_ = 0;
};

/// Casts the model to low precision with fp32 masters held by the optimizer, makes the
/// model cast floating inputs, and swaps in a MixedPrecisionOptimizer.
void apply_mixed_precision(BoostedObjects& o, const MixedPrecisionOptions& opts);

}  // namespace booster
