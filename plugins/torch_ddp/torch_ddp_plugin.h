// TorchDDPPlugin (Colossal-AI's name and options): data parallelism over all ranks.
// configure() broadcasts rank 0's parameters and buffers, wraps the model in a
// TorchDDPModel, which owns the gradient reducer (bucketed all-reduces launched from the
// gradient hooks while backward runs, finished at the end of backward by the autograd
// engine); the optimizer chain is left as it is, as Colossal-AI's.
#pragma once

#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "core/dist/process_group.h"
#include "ddp/ddp_model.h"

namespace booster::plugins {

using ddp::Reducer;
using ddp::ReducerOptions;
using ddp::TorchDDPModel;

struct TorchDDPOptions {
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool check_reduction = false;          // accepted for compatibility (deprecated in PyTorch)
  bool gradient_as_bucket_view = false;
  bool static_graph = false;             // accepted: buckets are static here anyway

  /// Reads the options of a [plugin] table (name = "torch_ddp"); unknown keys are refused.
  static TorchDDPOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// What the reducer takes of them.
  ReducerOptions reducer() const { return {bucket_cap_mb, find_unused_parameters, gradient_as_bucket_view}; }
};

class TorchDDPPlugin : public Plugin {
 public:
  explicit TorchDDPPlugin(TorchDDPOptions opts = {});
  std::string name() const override { return "torch_ddp"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16"}; }
  bool control_precision() const override { return false; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }
  bool support_split_batch() const override { return true; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  const TorchDDPOptions& options() const { return opts_; }

 private:
  LayoutCheckpointIO checkpoint_io_;
  TorchDDPOptions opts_;
};

}  // namespace booster::plugins
