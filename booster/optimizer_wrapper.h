// The optimizer side of boost() (Colossal-AI's OptimizerWrapper interface). Wrappers form
// a chain: a leaf runs the optimizer (the plain one here; MixedPrecisionOptimizer, ZeRO
// own master weights and update those), and each decorator around it (a plugin's
// gradient communication) forwards backward, step and zero_grad to the one it wraps.
// What users hold after boost() is the outermost.
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

class OptimizerWrapper {
 public:
  /// A leaf: runs `optim` on the parameters themselves.
  explicit OptimizerWrapper(std::shared_ptr<optim::Optimizer> optim);
  /// A decorator around `inner`.
  explicit OptimizerWrapper(std::shared_ptr<OptimizerWrapper> inner);
  virtual ~OptimizerWrapper() = default;
  OptimizerWrapper(const OptimizerWrapper&) = delete;
  OptimizerWrapper& operator=(const OptimizerWrapper&) = delete;

  virtual std::string type_name() const { return "OptimizerWrapper"; }

  // ---- Colossal-AI's interface ----
  /// Runs backward on loss (a layer may scale it, or synchronize gradients after).
  virtual void backward(const Tensor& loss, bool retain_graph = false);
  /// Runs backward from `tensor` with a given gradient (a pipeline stage's output). The
  /// gradient is not loss-scaled: it comes from a backward that was (Colossal-AI's rule).
  virtual void backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph = false);
  /// Updates the parameters.
  virtual void step();
  /// Clears gradients.
  virtual void zero_grad(bool set_to_none = true);
  /// Clips gradients to a global norm; returns the norm before clipping.
  double clip_grad_by_norm(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false) {
    return clip_norm(max_norm, norm_type, error_if_nonfinite, {});
  }
  /// Clamps every gradient element.
  virtual void clip_grad_by_value(double clip_value);
  /// The norm computed by the last clip_grad_by_norm, if any.
  virtual std::optional<double> get_grad_norm() const;
  /// The full optimizer state (every parameter's state in its logical shape).
  virtual optim::OptimizerStateDict state_dict() const;
  /// Restores state_dict()'s output (from any layout).
  virtual void load_state_dict(const optim::OptimizerStateDict& sd);
  std::vector<optim::ParamGroup>& param_groups() { return unwrap()->param_groups(); }
  /// The wrapped optimizer (Colossal-AI: unwrap()).
  std::shared_ptr<optim::Optimizer> unwrap() const;
  /// The wrapper this one decorates, or null for a leaf.
  std::shared_ptr<OptimizerWrapper> inner() const { return inner_; }
  /// The outermost wrapper of type W in the chain from here inward, or null.
  template <typename W>
  W* find() {
    return find_in_chain<W>(this);
  }
  /// Replaces the leaf of the chain (Booster's mixed precision swaps in its own).
  void replace_leaf(std::shared_ptr<OptimizerWrapper> leaf);
  /// Finishes pending gradient communication so gradients can be read.
  virtual void synchronize();
  /// Every parameter the optimizer updates.
  std::vector<Tensor> parameters() const;
  /// Seconds spent waiting for gradient communication after backward since the last reset
  /// (a plugin's reduction that did not overlap backward); 0 without any.
  virtual double grad_sync_wait_seconds() const { return inner_ ? inner_->grad_sync_wait_seconds() : 0; }
  virtual void reset_grad_sync_wait() {
    if (inner_) inner_->reset_grad_sync_wait();
  }

  // ---- checkpoints (each rank saves and loads what it holds) ----
  /// Where each parameter's state lives on this rank.
  virtual std::vector<StateLayout> state_layout() const;
  /// The state as this rank holds it: state tensors in their local shapes.
  virtual optim::OptimizerStateDict local_state_dict() const;
  /// What a checkpoint saves of this rank's state: local_state_dict(), except that state
  /// kept on the disk tier stays there, as entries "<param>/<state>" in their parameters'
  /// regions that are read only while the checkpoint writes them.
  struct CheckpointShare {
    optim::OptimizerStateDict dict;
    ShardedState on_disk;
  };
  virtual CheckpointShare local_checkpoint_state() const;
  /// Entries a load fills straight on the disk tier, one at a time: the states `keys` names
  /// (parameter -> its state names in the checkpoint) that this rank keeps there, their
  /// slots made when they do not exist yet. load_local_state_dict() then gets the steps and
  /// the other states. Default: none.
  virtual ShardedState local_load_targets(const std::map<std::string, std::vector<std::string>>& keys);
  /// Restores local_state_dict()'s form (state tensors in local shapes).
  virtual void load_local_state_dict(const optim::OptimizerStateDict& sd);

 protected:
  /// Clips by the global norm; `scope` combines local norm pieces across the ranks that
  /// hold different gradients (decorators that shard gradients compose theirs into it).
  virtual double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope);
  /// The leaf's clip: plain clipping of the parameters' gradients.
  double leaf_clip(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope);

  std::shared_ptr<optim::Optimizer> optim_;      // leaves only
  std::shared_ptr<OptimizerWrapper> inner_;      // decorators only
  std::optional<double> grad_norm_;
};

}  // namespace booster
