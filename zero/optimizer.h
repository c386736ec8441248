// LowLevelZeroOptimizer: the optimizer leaf under ZeRO stage 1 and 2 (Colossal-AI's
// LowLevelZeroOptimizer). It owns precision: the loss scaling and skip rule of every
// precision owner (LossScaling), the fp32 master chunks of the engine's shard store, and the optimizer
// state of this rank's chunks only. A step checks every rank's chunks for non-finite values,
// unscales and clips by the global norm inside the fused update of its chunks, writes them
// into the working parameters and all-gathers them (in the background with
// overlap_allgather, waited for by the next forward). With cpu_offload the masters and the
// optimizer state live in the disk store and pass through RAM one parameter at a time, the
// next one read ahead.
#pragma once

#include <map>
#include <memory>

#include "booster/loss_scaling.h"
#include "booster/optimizer_wrapper.h"
#include "zero/engine.h"

namespace booster::zero {

struct ZeroStepOptions {
  std::string precision = "fp16";
  GradScalerOptions scaler;
  double max_norm = 0;  // > 0: every step clips by the global norm
  bool overlap_allgather = false;
};

class LowLevelZeroOptimizer : public OptimizerLeaf {
 public:
  LowLevelZeroOptimizer(std::shared_ptr<optim::Optimizer> optim, std::shared_ptr<Engine> engine, ZeroStepOptions opts);
  std::string type_name() const override { return "LowLevelZeroOptimizer"; }
  void backward(const Tensor& loss, bool retain_graph = false) override;
  void step() override;
  void zero_grad(bool set_to_none = true) override { eng_->grads().zero(); }
  void clip_grad_by_value(double clip_value) override;
  std::optional<double> get_grad_norm() const override { return scaling_.grad_norm(); }
  /// The full state, every chunk all-gathered (collective); load_state_dict takes it back
  /// from any layout.
  optim::OptimizerStateDict state_dict() const override;
  void load_state_dict(const optim::OptimizerStateDict& sd) override;
  std::vector<StateLayout> state_layout() const override;
  optim::OptimizerStateDict local_state_dict() const override;
  /// Offloaded states stay on the disk tier: entries read one at a time by the checkpoint.
  CheckpointShare local_checkpoint_state() const override;
  /// Offloaded states are loaded straight into their slots on the disk tier.
  ShardedState local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) override;
  void load_local_state_dict(const optim::OptimizerStateDict& sd) override;

  Engine& engine() const { return *eng_; }
  const LossScaling& scaling() const { return scaling_; }
  /// Part i's optimizer states on the disk tier (state -> slot; empty before its first step).
  const std::map<std::string, int64_t>& state_slots(size_t i) const;

 protected:
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override;

 private:
  bool nonfinite_anywhere() const;
  std::vector<Tensor> chunks() const;
  /// Every part's parameter name, in the layout's order (the same on every rank of the group).
  std::vector<std::string> part_names() const;
  /// A layer-wise optimizer's partial sums of every part summed over its group (one
  /// all-reduce a data-parallel group of the layout).
  void sum_over_group(std::vector<std::vector<double>>& sums) const;
  // Offload: the state of part i in RAM for its update, and back to the store after.
  void prefetch_state(size_t i);
  void install_state(size_t i);
  void stash_state(size_t i);

  std::shared_ptr<Engine> eng_;
  ZeroStepOptions opts_;
  LossScaling scaling_;
  std::map<std::string, std::map<std::string, int64_t>> state_slots_;  // offload: parameter -> state -> slot
};

}  // namespace booster::zero
