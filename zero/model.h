// The model side of ZeRO and the composition every ZeRO plugin uses: apply_zero turns the
// boosted objects into a LowLevelZeroModel and a LowLevelZeroOptimizer sharing one Engine
// (what LowLevelZeroPlugin does over the world, HybridParallelPlugin over its dp group, and
// GeminiPlugin before it adds ZeRO-3's fetch hooks and its placement).
#pragma once

#include "booster/boosted_objects.h"
#include "zero/optimizer.h"

namespace booster::zero {

/// The model under ZeRO: parameters in the working precision, floating inputs cast to it,
/// the next forward waiting for the parameters' all-gather; checkpoints hold this rank's
/// fp32 master chunks; its GradSync is the engine's gradient reducer.
class LowLevelZeroModel : public ModelWrapper {
 public:
  LowLevelZeroModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<Engine> engine, DType input_dtype);
  std::string type_name() const override { return "LowLevelZeroModel"; }
  void before_forward() override;
  DType input_dtype() const override { return input_dtype_; }
  GradSync* grad_sync() const override { return eng_ ? &eng_->grads() : nullptr; }
  ShardedState checkpoint_state() override;
  void after_load() override;
  /// The engine (null when no optimizer was boosted).
  Engine* engine() const { return eng_.get(); }

 private:
  std::shared_ptr<Engine> eng_;
  DType input_dtype_;
};

/// ZeRO over `dp`: the group starts from its first rank's weights, the optimizer becomes a
/// LowLevelZeroOptimizer on this rank's chunks and the model a LowLevelZeroModel. Returns
/// the engine (null without an optimizer: the model is only cast to the working precision).
/// With a placer the parameters go to groups of their own (see layout.h), and the caller
/// has already made the ranks agree on the weights.
std::shared_ptr<Engine> apply_zero(BoostedObjects& o, const dist::ProcessGroup& dp, const ZeroOptions& opts,
                                   PartPlacer placer = {});

}  // namespace booster::zero
