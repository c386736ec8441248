// HybridParallelModule (see hybrid_parallel_module.h).
#include "plugins/hybrid_parallel/hybrid_parallel_module.h"

namespace booster::plugins {

HybridParallelModule::HybridParallelModule(std::shared_ptr<ModelWrapper> inner,
                                           std::shared_ptr<dist::ProcessGroupMesh> mesh, int stage,
                                           std::shared_ptr<const nn::TensorGrid> grid)
    : ModelWrapper(std::move(inner)), mesh_(std::move(mesh)), stage_(stage), grid_(std::move(grid)) {}

void HybridParallelModule::check_whole_forward() const {
  BOOSTER_CHECK(stage_ < 0, "HybridParallelPlugin: this rank is pipeline stage ", stage_, " of ", mesh_->size("pp"),
                " and holds only its layers; run the model with booster.execute_pipeline (training and evaluation)");
  ModelWrapper::check_whole_forward();
}

}  // namespace booster::plugins
