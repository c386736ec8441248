// TorchDDPPlugin (Colossal-AI's name and options): data parallelism over all ranks.
// configure() broadcasts rank 0's parameters and buffers, wraps the model in a
// TorchDDPModel, which owns the gradient reducer (bucketed all-reduces launched from the
// gradient hooks while backward runs, finished at the end of backward by the autograd
// engine); the optimizer chain is left as it is, as Colossal-AI's.
#pragma once

#include "booster/plugin.h"
#include "core/common/config.h"
#include "core/dist/process_group.h"
#include "zero/reducer.h"

namespace booster::plugins {

using zero::Reducer;
using zero::ReducerOptions;

struct TorchDDPOptions {
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool check_reduction = false;          // accepted for compatibility (deprecated in PyTorch)
  bool gradient_as_bucket_view = false;
  bool static_graph = false;             // accepted: buckets are static here anyway

  /// Reads the options of a [plugin] table (name = "torch_ddp"); unknown keys are refused.
  static TorchDDPOptions from_config(const Config& cfg, const std::string& table = "plugin");
};

/// The model under DDP (Colossal-AI's TorchDDPModel): broadcasts buffers before each
/// forward and owns the reducer.
class TorchDDPModel : public ModelWrapper {
 public:
  TorchDDPModel(std::shared_ptr<ModelWrapper> inner, const dist::ProcessGroup& group, const TorchDDPOptions& opts);
  std::string type_name() const override { return "TorchDDPModel"; }
  void before_forward() override;
  GradSync* grad_sync() const override { return reducer_.get(); }
  Reducer& reducer() const { return *reducer_; }
  const std::shared_ptr<Reducer>& shared_reducer() const { return reducer_; }

 private:
  const dist::ProcessGroup& group_;
  bool broadcast_buffers_;
  std::shared_ptr<Reducer> reducer_;
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
  TorchDDPOptions opts_;
};

}  // namespace booster::plugins
