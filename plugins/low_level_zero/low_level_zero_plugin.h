// LowLevelZeroPlugin (Colossal-AI's name, arguments and defaults): ZeRO stage 1 (optimizer
// states and fp32 masters partitioned over the data-parallel ranks) and stage 2 (gradients
// too), in fp16 with dynamic loss scaling, bf16 or fp32, with cpu_offload to the disk tier.
// Where Colossal-AI refuses no_sync under stage 2, micro-batches accumulate into the
// partitioned gradients instead.
#pragma once

#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "zero/model.h"

namespace booster::plugins {

using zero::LowLevelZeroModel;
using zero::LowLevelZeroOptimizer;

/// The ZeRO engine's options under their Colossal-AI names, and verbose.
struct LowLevelZeroOptions : zero::ZeroOptions {
  bool verbose = false;

  /// Reads a [plugin] table (name = "low_level_zero"); unknown keys and wrong types refused.
  static LowLevelZeroOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// Throws ValueError naming the first bad argument and what it accepts.
  void validate() const;
};

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
  LayoutCheckpointIO checkpoint_io_;
  LowLevelZeroOptions opts_;
};

}  // namespace booster::plugins
