// HybridParallelOptimizer (Colossal-AI's HybridParallelAMPOptimizer / HybridParallelZeroOptimizer
// role) decorates the optimizer chain of a tensor-parallel model: it clips by the global
// norm with every parameter counted once (a tensor-parallel shard on every tp rank, a
// replicated parameter on tp rank 0 only, a grid block held by several tp ranks on the first
// of them, summed over the tp group and over the pipeline stages, which hold different
// layers; the dp group is DDP's or ZeRO's business below), clips every step with max_norm,
// and gives state_dict() in the logical shapes by gathering the tensor-parallel blocks
// (boxes of any number of split dims). HybridParallelPlugin and GalvatronPlugin both use it.
#pragma once

#include <functional>
#include <memory>

#include "booster/optimizer_wrapper.h"
#include "core/dist/mesh.h"

namespace booster::shardformer {

/// How a plugin's parameters are split by tensor parallelism: each one's tensor-parallel
/// group (null: not split; a replicated parameter on it counts once there), and how the
/// per-rank shares of a norm are combined over the groups that hold different parameters.
struct TensorParallelGroups {
  std::function<const dist::ProcessGroup*(const Tensor& param)> tp_of;
  std::function<double(double local, bool is_max)> reduce;
  bool trivial = false;  // no tensor parallelism and nothing to combine
  /// Whether this rank counts a parameter in a norm; unset: a shard on every rank, a whole
  /// parameter on its tp group's rank 0.
  std::function<bool(const Tensor& param)> counted;
};

class HybridParallelOptimizer : public OptimizerDecorator {
 public:
  /// tp and pp of the mesh: every parameter on the mesh's tp group, norms summed over tp and
  /// pp. replicated_blocks (2D / 2.5D / 3D grids): a block that several tp ranks hold counts
  /// once, on the lowest of them (found at construction: collective over tp).
  HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner, std::shared_ptr<dist::ProcessGroupMesh> mesh,
                          double max_norm, bool replicated_blocks = false);
  HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner, TensorParallelGroups groups, double max_norm);
  std::string type_name() const override { return "HybridParallelOptimizer"; }
  /// Parameters another rank counts in the norm (a tied head's copy of the embeddings on
  /// the last pipeline stage: the first stage counts them).
  void count_elsewhere(const std::vector<Tensor>& params);
  void step() override;
  /// Every parameter's state in its logical shape (tensor-parallel shards all-gathered; collective).
  optim::OptimizerStateDict state_dict() const override;
  /// Takes state_dict()'s form from any layout: each rank keeps its slices.
  void load_state_dict(const optim::OptimizerStateDict& sd) override;

 protected:
  double clip_norm(double max_norm, double norm_type, bool error_if_nonfinite, const optim::NormScope& scope) override;

 private:
  /// Gives the base optimizer whole-tensor norms of blocked parameters (Lamb's and Lars's
  /// trust ratios): partial sums of squares summed over the parameter's tp group, each
  /// block counted once.
  void install_shard_sums();
  std::shared_ptr<dist::ProcessGroupMesh> mesh_;
  TensorParallelGroups groups_;
  double max_norm_;
};

}  // namespace booster::shardformer
