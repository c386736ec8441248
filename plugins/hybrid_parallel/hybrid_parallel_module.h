// HybridParallelPlugin's model wrapper. HybridParallelModule heads the model chain (tensor-
// parallel layers inside, DDP or ZeRO over the dp group and the precision layer below it);
// the optimizer chain's head is shardformer's HybridParallelOptimizer.
#pragma once

#include <memory>

#include "booster/model_wrapper.h"
#include "core/dist/mesh.h"
#include "nn/parallel/grid.h"

namespace booster::plugins {

/// Holds the mesh, so the process groups the tensor-parallel layers and the DDP or ZeRO
/// wrappers below refer to live as long as the boosted model.
class HybridParallelModule : public ModelWrapper {
 public:
  /// stage: this rank's pipeline stage, or -1 without a pipeline.
  HybridParallelModule(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<dist::ProcessGroupMesh> mesh, int stage = -1,
                       std::shared_ptr<const nn::TensorGrid> grid = nullptr);
  std::string type_name() const override { return "HybridParallelModule"; }
  const dist::ProcessGroupMesh& mesh() const { return *mesh_; }
  /// A pipeline stage holds only its layers: the whole model runs through execute_pipeline.
  void check_whole_forward() const override;

 private:
  std::shared_ptr<dist::ProcessGroupMesh> mesh_;
  int stage_;
  std::shared_ptr<const nn::TensorGrid> grid_;  // the grid layers' groups
};

}  // namespace booster::plugins
