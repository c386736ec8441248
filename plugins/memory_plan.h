// What a run config's plugin does to each rank's memory, in the terms of Galvatron's cost
// model (galvatron/cost_model.h), so that one model estimates every plugin (booster_estimate):
//   torch_ddp                  every layer DDP, reduced through ddp::Reducer (as NO_SHARD and
//                              zero_stage 0 below; the Booster's mixed_precision)
//   low_level_zero             ZeRO-1/2 over the world (its precision)
//   gemini                     ZeRO-3 on every layer and on the embeddings and head, gathered a
//                              chunk at a time (the chunk size as Gemini searches it)
//   torch_fsdp                 FULL_SHARD: ZeRO-3 gathered a unit at a time (the largest unit of
//                              its auto_wrap_policy; the whole model without one);
//                              SHARD_GRAD_OP: ZeRO-2; NO_SHARD: DDP
//   hybrid_parallel            1D tensor parallelism of tp_size on every layer, pp_size stages of
//                              num_microbatches, DDP (zero_stage 0) or ZeRO over dp, the
//                              gradient_checkpointing_ratio's first layers of a stage checkpointed
//   galvatron                  its own plan (the strategy file's or the global arguments')
// Each refuses, naming the key, what the cost model does not model (2D / 2.5D / 3D tensor
// modes, Gemini's partial placements).
#pragma once

#include <string>

#include "core/common/config.h"
#include "galvatron/plan.h"
#include "nn/module.h"

namespace booster::plugins {

struct MemoryPlan {
  galvatron::HybridPlan plan;     // layers, stages, degrees, data-parallel kinds, checkpointing, batch
  std::string precision;          // the working precision: fp32, bf16 or fp16
  double zero3_unit_params = 0;   // parameters a ZeRO-3 gather fetches at once (0: a layer)
  bool offload_states = false;    // masters and optimizer states on the disk tier (cpu_offload)
  bool ddp_buckets = false;       // DDP layers reduce through ddp::Reducer (buckets kept between steps)
  bool zero1 = false;             // ZeRO stage 1: whole gradients kept beside the reduction's
  bool megatron_sp = false;       // Megatron's sequence parallelism in the tensor-parallel layers (split_gather)
  int dp = 1;                     // data-parallel replicas (each takes plan.global_bsz / dp rows a step)
  std::string what;               // one line: the plugin and what it amounts to
};

/// The plan of the plugin in `cfg`'s [table] (no table: DDP, as without a plugin) for
/// `model` (its transformer layers through nn::PipelineModule; lazy is fine) on `world`
/// ranks, `batch` rows a data-parallel replica per step (train.batch_size), `checkpoint_ratio`
/// of each stage's layers checkpointed by the model itself (model.gradient_checkpointing;
/// 0: none), `booster_precision` the Booster's mixed_precision (for plugins that leave
/// precision to it). Bad arguments are ValueErrors naming the key.
MemoryPlan memory_plan(const Config& cfg, const std::string& table, const nn::Module& model, int world, int64_t batch,
                       double checkpoint_ratio, const std::string& booster_precision);

}  // namespace booster::plugins
