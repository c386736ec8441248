// Optimizer base: parameter groups with their own hyperparameters, per-parameter state
// keyed by parameter *name* (so a checkpoint survives a change of parallel layout). The
// optimizer owns no master weights: whoever owns precision (mixed precision, ZeRO) keeps
// the fp32 masters, or shards of them, and calls step_on() with them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::optim {

/// Named parameters, as Module::named_parameters() returns them.
using NamedParams = std::vector<std::pair<std::string, Tensor>>;

/// A group of parameters sharing hyperparameters ("lr", "weight_decay", "beta1", ...).
struct ParamGroup {
  NamedParams params;
  std::map<std::string, double> options;
  /// The option's value; throws ValueError naming it when absent.
  double get(const std::string& key) const;
  double& lr() { return options.at("lr"); }
  double lr() const { return options.at("lr"); }
};

/// Per-parameter state: a step count and named buffers (exp_avg, momentum_buffer, ...).
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
};

/// A serializable snapshot of an optimizer.
struct OptimizerStateDict {
  std::string type;  // "AdamW", ...
  struct Group {
    std::map<std::string, double> options;
    std::vector<std::string> param_names;
  };
  std::vector<Group> param_groups;
  std::map<std::string, ParamState> state;  // by parameter name
  std::map<std::string, double> extra;       // wrapper state (e.g. the loss scaler's)
};

/// One parameter's update inputs, by name: its fp32 value, updated in place (the
/// parameter, its master copy, or a shard of either), and its gradient of the same shape
/// (any floating dtype: a low-precision one is read as f32). State buffers take the
/// value's shape. working, when defined: the low-precision compute copy (same element
/// count, contiguous) written from the updated value, in the same pass over memory where
/// the optimizer fuses it (Adam), after the update otherwise.
struct UpdateTarget {
  std::string name;
  Tensor value;
  Tensor grad;
  Tensor working = {};
};

/// Base of every optimizer.
class Optimizer {
 public:
  /// Several groups; options missing from a group come from `defaults`, unknown ones are
  /// refused. `type` is the optimizer's name ("AdamW", ...).
  Optimizer(std::string type, std::vector<ParamGroup> groups, std::map<std::string, double> defaults);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// "AdamW", "SGD", ...
  const std::string& type_name() const { return type_; }
  /// Updates every parameter that has a gradient (low-precision parameters are staged
  /// through f32).
  virtual void step();
  /// Updates explicit values by parameter name; gradients are divided by grad_divisor
  /// inside the fused update (unscaling and clipping cost no extra pass).
  void step_on(const std::vector<UpdateTarget>& targets, double grad_divisor = 1.0);
  /// True when the update of an element reads only that element (Adam, SGD): such an
  /// optimizer may run on shards of a parameter. Lamb's trust ratio needs whole tensors.
  virtual bool elementwise() const { return true; }
  /// fp32 state tensors kept per parameter, each its size (Adam 2, SGD with momentum 1):
  /// what a placement plans for before the first step creates them.
  virtual int state_buffers() const { return 0; }
  /// Clears gradients (set_to_none) or zeroes them.
  void zero_grad(bool set_to_none = true);
  /// Adds a group (options default from the constructor's defaults).
  void add_param_group(ParamGroup group);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  std::map<std::string, ParamState>& state() { return state_; }
  const std::map<std::string, double>& defaults() const { return defaults_; }

  /// Snapshot of hyperparameters and state (tensors are copies).
  OptimizerStateDict state_dict() const;
  /// Restores a snapshot; parameters are matched by name, and a group whose parameters
  /// differ, or state for an unknown parameter or of the wrong shape, is a ValueError.
  /// `state_shapes` gives the shape a parameter's state takes here when it is not the
  /// parameter's own (the state of a ZeRO shard).
  void load_state_dict(const OptimizerStateDict& sd, const std::map<std::string, Shape>& state_shapes = {});

  /// The group holding parameter `name`; ValueError when no group does.
  const ParamGroup& group_of(const std::string& name) const;

  /// Completes per-tensor sums of squares of a parameter held in blocks (tensor
  /// parallelism): given this rank's partial sums for parameter `name`, leaves the sums over
  /// the whole tensor. Layer-wise optimizers (Lamb, Lars) call it for their norms; a plugin
  /// that splits parameters installs it (collective over the parameter's holders).
  using ShardSums = std::function<void(const std::string& name, std::vector<double>& sums)>;
  void set_shard_sums(ShardSums f) { shard_sums_ = std::move(f); }

  /// A layer-wise optimizer (Lamb, Lars) splits its update around whole-tensor sums of
  /// squares: layer_sums (the moments, this rank's partial sums), then layer_apply (the
  /// update from the whole sums), so it can step on shards (step_on_shards).
  virtual bool layerwise() const { return false; }
  /// Makes every parameter's partial sums whole at once (ZeRO: summed over the data-parallel
  /// group, one collective); `sums` holds every parameter of `names`, zeros where this rank
  /// has no shard.
  using AllShardSums = std::function<void(std::vector<std::vector<double>>& sums)>;
  /// step_on for targets that are flat shards of their parameters (ZeRO's chunks). A
  /// layer-wise optimizer takes each target's moments and partial sums, `complete` makes the
  /// sums of `names` whole (every parameter of the step on any rank, in one order
  /// everywhere), then the tensor-parallel completion (set_shard_sums) runs for each name
  /// and the updates follow; an element-wise optimizer steps as step_on does.
  void step_on_shards(const std::vector<UpdateTarget>& targets, double grad_divisor, const std::vector<std::string>& names,
                      const AllShardSums& complete);

 protected:
  /// Updates one parameter: `p` is its fp32 value (updated in place), `g` its fp32
  /// gradient, to be divided by grad_divisor_. An optimizer that fuses_io() gets `g` in any
  /// floating dtype (contiguous) and writes `working`, the compute copy, when it is defined;
  /// the others get an undefined `working` (the copy is written after them).
  virtual void update(const std::string& name, Tensor& p, const Tensor& g, ParamState& state, const ParamGroup& group,
                      const Tensor& working) = 0;
  /// True when update() reads a contiguous gradient of any floating dtype and writes
  /// `working` itself (one pass over memory instead of three).
  virtual bool fuses_io() const { return false; }
  /// A layer-wise optimizer's two halves (see layerwise()): the moments of p's (shard of
  /// the) parameter and its partial sums of squares; then the update from the whole sums.
  virtual std::vector<double> layer_sums(const std::string& name, Tensor& p, const Tensor& g, ParamState& state,
                                         const ParamGroup& group);
  virtual void layer_apply(const std::string& name, Tensor& p, const Tensor& g, ParamState& state, const ParamGroup& group,
                           const std::vector<double>& sums);

  double grad_divisor_ = 1.0;
  /// Whole-tensor sums from this rank's partial ones (see set_shard_sums).
  void complete_sums(const std::string& name, std::vector<double>& sums) const {
    if (shard_sums_) shard_sums_(name, sums);
  }

 private:
  void fill_defaults(ParamGroup& g) const;
  void update_one(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group,
                  const Tensor& working = {});
  /// update_one's checks and the f32 gradient it updates from.
  Tensor checked_grad(const std::string& name, const Tensor& p, const Tensor& grad, const Tensor& working, bool* fused) const;

  std::string type_;
  std::vector<ParamGroup> groups_;
  std::map<std::string, double> defaults_;
  std::map<std::string, ParamState> state_;
  ShardSums shard_sums_;
};

/// Biases, norms and any tensor of one dimension (and names ending in one of `skip`): what
/// weight decay (and LARS's trust ratio) leaves alone.
bool excluded_from_decay(const std::string& name, const Tensor& p, const std::vector<std::string>& skip = {});
/// Splits named parameters into a group with weight decay and one without
/// (excluded_from_decay); `no_decay_options` are set on the latter too (e.g. LAMB's or LARS's
/// trust ratio switched off there).
std::vector<ParamGroup> param_groups_no_decay(const NamedParams& params, double weight_decay,
                                              const std::vector<std::string>& skip = {},
                                              const std::map<std::string, double>& no_decay_options = {});

}  // namespace booster::optim
