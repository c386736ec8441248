// The one mixed-precision layer (Booster's mixed_precision and plugins' precision option
// both go through it): parameters become bf16/fp16 working copies (same handles), the fp32
// masters live in one MasterParams that the optimizer leaf updates and the model's
// checkpoints hold, and the working copies are refreshed after each step. fp16 scales the
// loss with a DynamicGradScaler; unscaling and clipping happen inside the fused update
// (div = scale, times the clip factor when it exceeds 1) as Colossal-AI's
// MixedPrecisionOptimizer does. A non-finite gradient on any rank skips the step on every
// rank (fp16: and backs the scale off); under bf16 it is reported, and skipped or raised.
#pragma once

#include <memory>
#include <string>

#include "booster/loss_scaling.h"
#include "booster/master_params.h"
#include "booster/plugin.h"

namespace booster {

struct MixedPrecisionOptions {
  std::string precision = "bf16";  // "bf16" or "fp16"
  GradScalerOptions scaler;        // fp16 only
  bool skip_nonfinite = true;      // bf16: skip the step (true) or stop with an error (false)
};

/// The model under mixed precision: floating inputs are cast to the working precision,
/// checkpoints hold the fp32 masters, and loading refreshes the working copies.
class MixedPrecisionModel : public ModelWrapper {
 public:
  MixedPrecisionModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<MasterParams> masters);
  std::string type_name() const override { return "MixedPrecisionModel"; }
  DType input_dtype() const override { return masters_->working_dtype(); }
  ShardedState checkpoint_state() override { return masters_->substitute(ModelWrapper::checkpoint_state()); }
  void after_load() override;
  const MasterParams& masters() const { return *masters_; }

 private:
  std::shared_ptr<MasterParams> masters_;
};

/// The optimizer leaf under mixed precision: it updates the masters and refreshes the
/// working copies; a plugin's decorators wrap it.
class MixedPrecisionOptimizer : public OptimizerLeaf {
 public:
  MixedPrecisionOptimizer(std::shared_ptr<optim::Optimizer> optim, std::shared_ptr<MasterParams> masters,
                          MixedPrecisionOptions opts);
  std::string type_name() const override { return "MixedPrecisionOptimizer"; }
  void backward(const Tensor& loss, bool retain_graph = false) override;
  void step() override;
  void clip_grad_by_value(double clip_value) override;
  optim::OptimizerStateDict state_dict() const override { return with_scaler(optim_->state_dict()); }
  void load_state_dict(const optim::OptimizerStateDict& sd) override;
  optim::OptimizerStateDict local_state_dict() const override { return state_dict(); }
  void load_local_state_dict(const optim::OptimizerStateDict& sd) override { load_state_dict(sd); }

  double loss_scale() const { return scaling_.loss_scale(); }
  const DynamicGradScaler& scaler() const { return scaling_.scaler(); }
  const MasterParams& masters() const { return *masters_; }
  bool last_step_skipped() const { return scaling_.last_step_skipped(); }
  int64_t skipped_steps() const { return scaling_.skipped_steps(); }
  std::optional<double> get_grad_norm() const override { return scaling_.grad_norm(); }

 protected:
  /// Returns the unscaled global norm; the clip itself is applied by the next step().
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override;

 private:
  bool found_nonfinite_on_any_rank();
  std::vector<Tensor> working_params() const;
  optim::OptimizerStateDict with_scaler(optim::OptimizerStateDict sd) const;
  std::shared_ptr<MasterParams> masters_;
  LossScaling scaling_;
};

/// Makes fp32 masters of the model's parameters (which become low-precision working
/// copies), wraps the model in a MixedPrecisionModel and puts a MixedPrecisionOptimizer
/// at the leaf of the optimizer chain; both share the one MasterParams.
void apply_mixed_precision(BoostedObjects& o, const MixedPrecisionOptions& opts);

}  // namespace booster
