// TorchDDPPlugin (Colossal-AI's name and options): data parallelism over all ranks.
// Parameters and buffers are broadcast from rank 0 at boost; gradients are averaged by
// bucketed all-reduces launched from the gradient hooks while backward runs.
#pragma once

#include "booster/plugin.h"
#include "core/common/config.h"
#include "plugins/torch_ddp/reducer.h"

namespace booster::plugins {

struct TorchDDPOptions {
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool check_reduction = false;          // accepted for compatibility (deprecated in PyTorch)
  bool gradient_as_bucket_view = false;
  bool static_graph = false;             // accepted: buckets are static here anyway

  /// Reads the options of a [plugin] table (name = "torch_ddp"); unknown keys are refused.
  static TorchDDPOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// The accepted keys below `table`.
  static ConfigSchema schema(const std::string& table = "plugin");
};

class TorchDDPPlugin : public Plugin {
 public:
  explicit TorchDDPPlugin(TorchDDPOptions opts = {});
  std::string name() const override { return "torch_ddp"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16"}; }
  bool control_precision() const override { return false; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  NoSyncScope no_sync(BoostedModel& model, OptimizerWrapper* optimizer) override;
  std::shared_ptr<data::DataLoader> prepare_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                                       const DataLoaderArgs& args) override;
  const TorchDDPOptions& options() const { return opts_; }
  /// The reducer of the last configured model (benchmarks read its wait time).
  Reducer* reducer() const { return reducer_.get(); }

 private:
  TorchDDPOptions opts_;
  std::shared_ptr<Reducer> reducer_;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace booster::plugins
