// TorchDDPPlugin (Colossal-AI's name and options): data parallelism over all ranks.
// configure() broadcasts rank 0's parameters and buffers, wraps the model in a
// TorchDDPModel (which owns the gradient reducer: bucketed all-reduces launched from the
// gradient hooks while backward runs) and the optimizer chain in a DDPOptimizer, which
// finishes the reduction before anything reads gradients.
#pragma once

#include "booster/plugin.h"
#include "core/common/config.h"
#include "core/dist/process_group.h"
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
};

/// The model under DDP (Colossal-AI's TorchDDPModel): broadcasts buffers before each
/// forward and owns the reducer its optimizer waits on.
class TorchDDPModel : public ModelWrapper {
 public:
  TorchDDPModel(std::shared_ptr<ModelWrapper> inner, const dist::ProcessGroup& group, const TorchDDPOptions& opts);
  std::string type_name() const override { return "TorchDDPModel"; }
  void before_forward() override;
  Reducer& reducer() const { return *reducer_; }
  const std::shared_ptr<Reducer>& shared_reducer() const { return reducer_; }

 private:
  const dist::ProcessGroup& group_;
  bool broadcast_buffers_;
  std::shared_ptr<Reducer> reducer_;
};

/// The optimizer under DDP: gradients are averaged before they are read.
class DDPOptimizer : public OptimizerWrapper {
 public:
  DDPOptimizer(std::shared_ptr<OptimizerWrapper> inner, std::shared_ptr<Reducer> reducer);
  std::string type_name() const override { return "DDPOptimizer"; }
  void backward(const Tensor& loss, bool retain_graph = false) override;
  void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false) override;
  void step() override;
  void synchronize() override;
  void clip_grad_by_value(double clip_value) override;
  double grad_sync_wait_seconds() const override { return reducer_->wait_seconds(); }
  void reset_grad_sync_wait() override { reducer_->reset_wait_seconds(); }

 protected:
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override;

 private:
  std::shared_ptr<Reducer> reducer_;
};

/// A no_sync scope for a model with a TorchDDPModel in its chain (`plugin` names it in errors).
NoSyncScope ddp_no_sync(ModelWrapper& model, const std::string& plugin);

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
  NoSyncScope no_sync(ModelWrapper& model, OptimizerWrapper* optimizer) override;
  const TorchDDPOptions& options() const { return opts_; }

 private:
  TorchDDPOptions opts_;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

}  // namespace booster::plugins
