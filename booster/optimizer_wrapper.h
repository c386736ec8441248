// OptimizerWrapper (Colossal-AI's interface): what users hold after boost(). Plugins and
// mixed precision subclass it to add their communication and scaling; the base runs the
// plain optimizer.
#pragma once

#include <memory>
#include <optional>

#include "core/tensor/tensor.h"
#include "optim/clip.h"
#include "optim/optimizer.h"

namespace booster {

class OptimizerWrapper {
 public:
  explicit OptimizerWrapper(std::shared_ptr<optim::Optimizer> optim) : optim_(std::move(optim)) {}
  virtual ~OptimizerWrapper() = default;

  /// Runs backward on loss (a plugin may scale it or synchronize after).
  virtual void backward(const Tensor& loss, bool retain_graph = false);
  /// Runs backward from `tensor` with a given gradient (a pipeline stage's output).
  virtual void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false);
  /// Updates the parameters.
  virtual void step();
  /// Clears gradients.
  virtual void zero_grad(bool set_to_none = true);
  /// Clips gradients to a global norm; returns the norm before clipping.
  virtual double clip_grad_by_norm(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);
  /// Clamps every gradient element.
  virtual void clip_grad_by_value(double clip_value);
  /// The norm computed by the last clip_grad_by_norm, if any.
  std::optional<double> get_grad_norm() const { return grad_norm_; }

  virtual optim::OptimizerStateDict state_dict() const { return optim_->state_dict(); }
  virtual void load_state_dict(const optim::OptimizerStateDict& sd) { optim_->load_state_dict(sd); }
  std::vector<optim::ParamGroup>& param_groups() { return optim_->param_groups(); }
  /// The wrapped optimizer.
  std::shared_ptr<optim::Optimizer> unwrap() const { return optim_; }
  /// Finishes pending gradient communication (plugins) so gradients can be read.
  void synchronize() { sync_grads(); }
  /// Combines a local norm piece across the ranks that hold different gradients.
  optim::NormReducer reducer() const { return norm_reducer(); }
  /// Every parameter the optimizer updates.
  std::vector<Tensor> parameters() const;

 protected:
  /// Combines a local norm piece across ranks; identity here, a collective in plugins
  /// whose ranks hold different gradients.
  virtual optim::NormReducer norm_reducer() const { return {}; }
  /// Called before anything reads gradients (step, clipping); plugins finish their
  /// pending gradient communication here.
  virtual void sync_grads() {}

  std::shared_ptr<optim::Optimizer> optim_;
  std::optional<double> grad_norm_;
};

}  // namespace booster
