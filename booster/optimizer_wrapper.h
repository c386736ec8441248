// The optimizer side of boost() (Colossal-AI's OptimizerWrapper interface). Wrappers form
// a chain of two kinds of link, separate types: one OptimizerLeaf at the end runs the
// optimizer (the plain one; MixedPrecisionOptimizer and LowLevelZeroOptimizer own master
// weights and update those), and OptimizerDecorators around it (HybridParallelOptimizer's
// global norm) forward what they do not change to the link they wrap. Gradient
// synchronization is not an optimizer's business: backward finishes it (GradSync). What
// users hold after boost() is the outermost link.
#pragma once

#include <memory>
#include <optional>

#include "booster/model_wrapper.h"
#include "core/tensor/tensor.h"
#include "optim/clip.h"
#include "optim/optimizer.h"

namespace booster {

/// Where one parameter's optimizer state lives on this rank: its name, the shape of the
/// state tensors here, and their region of the logical (full-parameter-shaped) state.
struct StateLayout {
  std::string name;
  Shape local_shape;
  Region region;
};

/// The interface every link of the chain implements.
class OptimizerWrapper {
 public:
  OptimizerWrapper() = default;
  virtual ~OptimizerWrapper() = default;
  OptimizerWrapper(const OptimizerWrapper&) = delete;
  OptimizerWrapper& operator=(const OptimizerWrapper&) = delete;

  virtual std::string type_name() const = 0;

  // ---- Colossal-AI's interface ----
  /// Runs backward on loss (a precision owner scales it first).
  virtual void backward(const Tensor& loss, bool retain_graph = false) = 0;
  /// Runs backward from `tensor` with a given gradient (a pipeline stage's output). The
  /// gradient is not loss-scaled: it comes from a backward that was (Colossal-AI's rule).
  virtual void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false) = 0;
  /// Updates the parameters.
  virtual void step() = 0;
  /// Clears gradients.
  virtual void zero_grad(bool set_to_none = true) = 0;
  /// Clips gradients to a global norm; returns the norm before clipping.
  double clip_grad_by_norm(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false) {
    return clip_norm(max_norm, norm_type, error_if_nonfinite, {});
  }
  /// Clamps every gradient element.
  virtual void clip_grad_by_value(double clip_value) = 0;
  /// The norm computed by the last clip_grad_by_norm, if any.
  virtual std::optional<double> get_grad_norm() const = 0;
  /// The full optimizer state (every parameter's state in its logical shape).
  virtual optim::OptimizerStateDict state_dict() const = 0;
  /// Restores state_dict()'s output (from any layout).
  virtual void load_state_dict(const optim::OptimizerStateDict& sd) = 0;
  std::vector<optim::ParamGroup>& param_groups() { return unwrap()->param_groups(); }
  /// The wrapped optimizer (Colossal-AI: unwrap()).
  virtual std::shared_ptr<optim::Optimizer> unwrap() const = 0;
  /// The link this one decorates, or null for the leaf.
  virtual std::shared_ptr<OptimizerWrapper> inner() const { return nullptr; }
  /// The outermost link of type W in the chain from here inward, or null.
  template <typename W>
  W* find() {
    return find_in_chain<W>(this);
  }
  /// Every parameter the optimizer updates.
  std::vector<Tensor> parameters() const;

  // ---- checkpoints (each rank saves and loads what it holds) ----
  /// Where each parameter's state lives on this rank.
  virtual std::vector<StateLayout> state_layout() const = 0;
  /// The state as this rank holds it: state tensors in their local shapes.
  virtual optim::OptimizerStateDict local_state_dict() const = 0;
  /// What a checkpoint saves of this rank's state: local_state_dict(), except that state
  /// kept on the disk tier stays there, as entries "<param>/<state>" in their parameters'
  /// regions that are read only while the checkpoint writes them.
  struct CheckpointShare {
    optim::OptimizerStateDict dict;
    ShardedState on_disk;
  };
  virtual CheckpointShare local_checkpoint_state() const = 0;
  /// Entries a load fills straight on the disk tier, one at a time: the states `keys` names
  /// (parameter -> its state names in the checkpoint) that this rank keeps there, their
  /// slots made when they do not exist yet. load_local_state_dict() then gets the steps and
  /// the other states.
  virtual ShardedState local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) = 0;
  /// Restores local_state_dict()'s form (state tensors in local shapes).
  virtual void load_local_state_dict(const optim::OptimizerStateDict& sd) = 0;

 protected:
  friend class OptimizerDecorator;
  /// Clips by the global norm; `scope` combines local norm pieces across the ranks that
  /// hold different gradients (decorators that shard gradients compose theirs into it).
  virtual double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) = 0;
};

/// The leaf: runs `optim` on the parameters themselves (Colossal-AI's plain
/// OptimizerWrapper, what boost() returns without a plugin or precision that owns the step).
class OptimizerLeaf : public OptimizerWrapper {
 public:
  explicit OptimizerLeaf(std::shared_ptr<optim::Optimizer> optim);
  std::string type_name() const override { return "OptimizerWrapper"; }
  void backward(const Tensor& loss, bool retain_graph = false) override;
  void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false) override;
  void step() override;
  void zero_grad(bool set_to_none = true) override;
  void clip_grad_by_value(double clip_value) override;
  std::optional<double> get_grad_norm() const override { return grad_norm_; }
  optim::OptimizerStateDict state_dict() const override;
  void load_state_dict(const optim::OptimizerStateDict& sd) override;
  std::shared_ptr<optim::Optimizer> unwrap() const override { return optim_; }
  std::vector<StateLayout> state_layout() const override;
  optim::OptimizerStateDict local_state_dict() const override;
  CheckpointShare local_checkpoint_state() const override;
  /// Default: none (nothing kept on the disk tier).
  ShardedState local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) override;
  void load_local_state_dict(const optim::OptimizerStateDict& sd) override;

 protected:
  /// Plain clipping of the parameters' gradients.
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override;

  std::shared_ptr<optim::Optimizer> optim_;
  std::optional<double> grad_norm_;
};

/// A decorator: forwards everything to the link it wraps; subclasses override what they add.
class OptimizerDecorator : public OptimizerWrapper {
 public:
  explicit OptimizerDecorator(std::shared_ptr<OptimizerWrapper> inner);
  void backward(const Tensor& loss, bool retain_graph = false) override { inner_->backward(loss, retain_graph); }
  void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false) override {
    inner_->backward_by_grad(tensor, grad, retain_graph);
  }
  void step() override { inner_->step(); }
  void zero_grad(bool set_to_none = true) override { inner_->zero_grad(set_to_none); }
  void clip_grad_by_value(double clip_value) override { inner_->clip_grad_by_value(clip_value); }
  std::optional<double> get_grad_norm() const override { return inner_->get_grad_norm(); }
  optim::OptimizerStateDict state_dict() const override { return inner_->state_dict(); }
  void load_state_dict(const optim::OptimizerStateDict& sd) override { inner_->load_state_dict(sd); }
  std::shared_ptr<optim::Optimizer> unwrap() const override { return inner_->unwrap(); }
  std::shared_ptr<OptimizerWrapper> inner() const override { return inner_; }
  std::vector<StateLayout> state_layout() const override { return inner_->state_layout(); }
  optim::OptimizerStateDict local_state_dict() const override { return inner_->local_state_dict(); }
  CheckpointShare local_checkpoint_state() const override { return inner_->local_checkpoint_state(); }
  ShardedState local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) override {
    return inner_->local_load_targets(keys);
  }
  void load_local_state_dict(const optim::OptimizerStateDict& sd) override { inner_->load_local_state_dict(sd); }
  /// Replaces the leaf at the end of the chain (Booster's mixed precision swaps in its own).
  void replace_leaf(std::shared_ptr<OptimizerLeaf> leaf);

 protected:
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override {
    return inner_->clip_norm(max_norm, norm_type, error_if_nonfinite, scope);
  }

 private:
  std::shared_ptr<OptimizerWrapper> inner_;
};

}  // namespace booster
