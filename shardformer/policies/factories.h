// The replacement factories the built-in policies share: tensor-parallel linears, dropouts
// on replicated or split activations, and sequence-parallel LayerNorms.
#pragma once

#include "nn/parallel/dropout.h"
#include "nn/parallel/layernorm.h"
#include "nn/parallel/linear_1d.h"
#include "shardformer/policy.h"

namespace booster::shardformer {

inline ModuleFactory column(nn::Linear1DOptions o = {}) {
  return [o](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::Linear1DCol::from_native_module(m, c.tp_group(), o);
  };
}
inline ModuleFactory row(nn::Linear1DOptions o = {}) {
  return [o](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::Linear1DRow::from_native_module(m, c.tp_group(), o);
  };
}
/// Dropout drawing alike over the tp group (parallel_input false) or per tp rank.
inline ModuleFactory dropout(bool parallel_input) {
  return [parallel_input](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::TPDropout::from_native_module(m, parallel_input ? c.parallel_generator : c.replicated_generator,
                                             parallel_input);
  };
}
inline ModuleFactory sp_layernorm(int64_t gather_seq_len) {
  return [gather_seq_len](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::SequenceParallelLayerNorm::from_native_module(m, c.tp_group(), gather_seq_len);
  };
}

}  // namespace booster::shardformer
