// GeminiPlugin (Colossal-AI's name, arguments and defaults): chunked ZeRO-3.
// Parameters are packed into chunks (the chunk size searched as Colossal-AI does:
// search_range_m, min_chunk_size_m, hidden_dim, or given by chunk_config_dict) in the
// order the first forward used them (registration order until the first step), each
// parameter split over the dp ranks;
// a chunk's parameters exist in full only while a module that uses them runs forward or
// backward (all-gathered by its forward and backward pre-hooks, released when the last of
// its modules is done and, in backward, once its gradients are reduce-scattered). fp32
// masters, gradients and optimizer states are kept per shard (the ZeRO-2 machinery of
// LowLevelZeroPlugin: buckets are the chunks). static placement: shard_param_frac of the
// chunks are sharded (the rest stay gathered, as ZeRO-2), offload_optim_frac of them keep
// their masters and optimizer states on the disk tier (the first parameters first), and
// with both at 1, offload_param_frac of the chunks keep this rank's parameter slices there
// too (read back for a fetch and for the update). auto placement (placement.h): every
// chunk's states have a place on the disk tier and the chunks that fit under the memory
// cap (memory_cap_mb, else BOOSTER_MEMORY_CAP_MB, else RAM / local ranks) beside the
// measured non-model memory stay pinned in RAM. Not yet: tensor parallelism inside Gemini.
#pragma once

#include <memory>

#include "booster/grad_scaler.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "plugins/gemini/placement.h"
#include "zero/options.h"

namespace booster::plugins {

struct GeminiOptions {
  // chunk_config_dict (Colossal-AI: {dp size: {chunk_size, keep_gathered}}): a [plugin.chunk_config_dict]
  // table with chunk_size (elements; 0: None, searched) and keep_gathered (chunks not sharded).
  int64_t chunk_size = 0;
  bool keep_gathered = false;
  std::string placement_policy = "static";
  bool enable_gradient_accumulation = false;
  int max_prefetch = 0;
  double shard_param_frac = 1.0;
  double offload_optim_frac = 0.0;
  double offload_param_frac = 0.0;
  double warmup_non_model_data_ratio = 0.8;
  double steady_cuda_cap_ratio = 0.9;
  bool pin_memory = false;
  bool force_outputs_fp32 = false;
  bool strict_ddp_mode = false;
  double search_range_m = 32;
  int64_t hidden_dim = 0;  // 0: None
  double min_chunk_size_m = 32;
  double gpu_margin_mem_ratio = 0.0;
  double norm_type = 2.0;
  int tp_size = 1;
  int extra_dp_size = 1;
  bool enable_async_reduce = true;
  bool verbose = false;
  double memory_cap_mb = 0;  // auto: this rank's RAM cap (0: BOOSTER_MEMORY_CAP_MB, else RAM / local ranks)
  /// The ZeRO engine's options Gemini takes under Colossal-AI's keys (precision,
  /// master_weights, max_norm, offload_dir, the loss-scale ones); configure() derives the
  /// rest from the chunk and placement arguments (stage 2 buckets = chunks).
  zero::ZeroOptions zero = zero_defaults();

  /// Colossal-AI's defaults for GeminiPlugin: initial_scale 2**16.
  static zero::ZeroOptions zero_defaults();

  /// Reads a [plugin] table (name = "gemini"); unknown keys and wrong types refused.
  static GeminiOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// Throws ValueError naming the first bad argument.
  void validate() const;
};

/// The chunk size (elements) for parameters of these sizes over dp ranks, as Colossal-AI's
/// search_chunk_configuration: from max(min_chunk_size, the largest parameter) up through
/// search_range in steps of hidden_dim (1024 when none), the size wasting the fewest
/// elements when the parameters are packed in order.
int64_t search_chunk_size(const std::vector<int64_t>& numels, int64_t min_chunk_size, int64_t search_range,
                          int64_t step);
/// The chunk size (elements) Gemini packs parameters of these sizes (backward's order) into
/// under `opts`: chunk_config_dict's chunk_size (at least the largest parameter), else searched.
int64_t gemini_chunk_elems(const GeminiOptions& opts, const std::vector<int64_t>& numels);

class GeminiPlugin : public Plugin {
 public:
  explicit GeminiPlugin(GeminiOptions opts = {});
  std::string name() const override { return "gemini"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16", "fp32"}; }
  bool control_precision() const override { return true; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return opts_.enable_gradient_accumulation; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  NoSyncScope no_sync(ModelWrapper& model, OptimizerWrapper* optimizer) override;
  const GeminiOptions& options() const { return opts_; }
  /// auto placement of the last boost (null under static placement).
  const AutoPlacement* placement() const { return placement_.get(); }

 private:
  LayoutCheckpointIO checkpoint_io_;
  GeminiOptions opts_;
  std::shared_ptr<AutoPlacement> placement_;
};

}  // namespace booster::plugins
