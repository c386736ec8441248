// LowLevelZeroPlugin (Colossal-AI's name, arguments and defaults): ZeRO stage 1 (optimizer
// states and fp32 masters partitioned over the data-parallel ranks) and stage 2 (gradients
// too), in fp16 with dynamic loss scaling, bf16 or fp32, with cpu_offload to the disk tier.
// Where Colossal-AI refuses no_sync under stage 2, micro-batches accumulate into the
// partitioned gradients instead.
#pragma once

#include "booster/plugin.h"
#include "core/common/config.h"
#include "plugins/low_level_zero/zero_optimizer.h"

namespace booster::plugins {

struct LowLevelZeroOptions {
  int stage = 1;
  std::string precision = "fp16";
  GradScalerOptions scaler{4294967296.0, 1, 2, 0.5, 1000, 2, 4294967296.0};  // initial_scale 2**32, ... as Colossal-AI
  double max_norm = 0.0;
  double norm_type = 2.0;
  double reduce_bucket_size_in_m = 12;  // millions of elements a bucket
  std::string communication_dtype;     // "" (the gradients' dtype), "fp16", "bf16" or "fp32"
  bool overlap_communication = true;
  bool overlap_allgather = false;
  bool cpu_offload = false;             // masters and optimizer states in the disk tier
  std::string offload_dir;              // where the disk tier's file goes ("": default_offload_dir(), the run's)
  double offload_frac = 1.0;            // with cpu_offload: the share of the parameters offloaded (Gemini's offload_optim_frac)
  bool master_weights = true;
  bool verbose = false;
  bool cast_inputs = true;

  /// Reads a [plugin] table (name = "low_level_zero"); unknown keys and wrong types refused.
  static LowLevelZeroOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// Throws ValueError naming the first bad argument and what it accepts.
  void validate() const;
};

/// The model under ZeRO: parameters in the working precision, floating inputs cast to it,
/// the next forward waiting for the parameters' all-gather; checkpoints hold this rank's
/// fp32 master chunks.
class LowLevelZeroModel : public ModelWrapper {
 public:
  LowLevelZeroModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<ZeroPartition> partition,
                    std::shared_ptr<ZeroGrads> grads, DType input_dtype);
  std::string type_name() const override { return "LowLevelZeroModel"; }
  void before_forward() override;
  DType input_dtype() const override { return input_dtype_; }
  GradSync* grad_sync() const override { return grads_.get(); }
  ShardedState checkpoint_state() override;
  void after_load() override;
  /// The gradients (null when no optimizer was boosted).
  ZeroGrads* grads() const { return grads_.get(); }
  /// The partition (null when no optimizer was boosted).
  ZeroPartition* partition() const { return zp_.get(); }

 private:
  std::shared_ptr<ZeroPartition> zp_;
  std::shared_ptr<ZeroGrads> grads_;
  DType input_dtype_;
};

/// ZeRO over `dp`: the group starts from its first rank's weights, the optimizer becomes a
/// LowLevelZeroOptimizer on this rank's chunks and the model a LowLevelZeroModel (what
/// LowLevelZeroPlugin does over the world, and HybridParallelPlugin over its dp group).
void apply_low_level_zero(BoostedObjects& o, const dist::ProcessGroup& dp, const LowLevelZeroOptions& opts);

class LowLevelZeroPlugin : public Plugin {
 public:
  explicit LowLevelZeroPlugin(LowLevelZeroOptions opts = {});
  std::string name() const override { return "low_level_zero"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16", "fp32"}; }
  bool control_precision() const override { return true; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }
  bool support_split_batch() const override { return true; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  const LowLevelZeroOptions& options() const { return opts_; }

 private:
  LowLevelZeroOptions opts_;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace booster::plugins
