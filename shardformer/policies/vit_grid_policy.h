// The ViT policy's 2D, 2.5D and 3D tensor parallelism (legacy Colossal-AI's hybrid-parallel
// ViT): the embeddings take their rows of the batch and a block of the features, every
// linear of a block is a grid linear (query, key, value and intermediate.dense from the
// residual layout, attention.output.dense and output.dense back to it), the layer norms
// normalize partitioned features, attention runs on the rank's own heads and rows, dropouts
// draw per rank (each holds its own block), and the classifier gathers every row's logits.
#pragma once

#include "nn/parallel/grid.h"
#include "nn/vit_config.h"
#include "shardformer/policy.h"

namespace booster::shardformer {

/// Refuses a ViT the grid cannot partition (ValueError naming the size and the grid).
void vit_grid_sanity_check(const nn::ViTConfig& c, const nn::TensorGrid& grid, const std::string& who);

/// The module policy of a ViT on config.grid.
std::map<std::string, ModulePolicyDescription> vit_grid_module_policy(const nn::ViTConfig& c, const ShardConfig& config);

}  // namespace booster::shardformer
