// HybridParallelPlugin (Colossal-AI's name, arguments, defaults and checks): tensor
// parallelism through a shardformer policy (ViT, GPT-2 and LLaMA built in, custom_policy for
// any other model), 1D or, as legacy Colossal-AI's tensor modes, on a 2D, 2.5D or 3D grid
// (tp_mode); sequence parallelism: split_gather over the tp group (ring: its gather and
// reduce-scatter overlapped with the linears, round the group), all_to_all (Ulysses) and
// ring_attn (ring attention, causal language models) over an sp axis whose ranks are data
// parallel too; data parallelism over the dp group (DDP at
// zero_stage 0, the ZeRO-1/2 optimizer of LowLevelZeroPlugin otherwise) and fp16 / bf16 /
// fp32 with the shared loss-scaling rule. Ranks form a (dp, pp, sp, tp) mesh, tp innermost
// (dp_outside; (pp, dp, sp, tp) otherwise; sp is 1 but under Ulysses and ring attention). Pipeline parallelism
// (pp_size > 1): each stage keeps the layers of its model chunks (the others' tensors are
// released and the optimizer's groups filtered to what it holds) and runs them through
// execute_pipeline with the 1F1B, the interleaved or the zero bubble V schedule (zbv: its
// backwards split into B and W, its order simulated from the passes' measured costs, which go
// with the optimizer's checkpoint); DDP or ZeRO-1/2 synchronize a stage's gradients once after
// its last micro-batch; a head tied to the embeddings keeps a copy on the last stage (in the
// V the first stage holds both). Where Colossal-AI refuses ZeRO in fp32, ZeRO-2 with a pipeline and
// no_sync under ZeRO-2, all work here.
#pragma once

#include <memory>
#include <vector>

#include "booster/grad_scaler.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "core/dist/mesh.h"
#include "pipeline/schedule.h"
#include "pipeline/zero_bubble.h"
#include "shardformer/policy.h"
#include "zero/options.h"

namespace booster::plugins {

struct HybridParallelOptions {
  int tp_size = 1;
  /// Tensor parallelism's kind (legacy Colossal-AI's tensor modes): "1d" (Megatron), "2d"
  /// (tp_size = q^2), "2.5d" (tp_size = q^2 * tp_depth) or "3d" (tp_size = q^3).
  std::string tp_mode = "1d";
  int tp_depth = 1;
  int pp_size = 1;
  int sp_size = 0;  // None
  /// Colossal-AI's kernel switches (kernels::FusedKernels). enable_flash_attention and
  /// enable_fused_normalization default to true here, against Colossal-AI's False, so the
  /// fused kernels (this project's speed) stay the default: attention as one op that keeps no
  /// score graph (causal: FlashAttention's online softmax, no [T, T] matrix), norms one pass
  /// each way; false runs the plain ops they amount to (score product, softmax, context
  /// product; mean, variance, rsqrt), as Colossal-AI's False runs the model's own modules.
  /// enable_all_optimization turns both on. enable_jit_fused is refused: there is no fused
  /// bias + GELU or dropout + add kernel here.
  bool enable_all_optimization = false;
  bool enable_fused_normalization = true;
  bool enable_flash_attention = true;
  bool enable_jit_fused = false;
  kernels::FusedKernels fused_kernels() const {
    return {enable_all_optimization || enable_flash_attention, enable_all_optimization || enable_fused_normalization};
  }
  bool enable_sequence_parallelism = false;
  std::string sequence_parallelism_mode;  // "" (None): split_gather when enabled
  /// split_gather's gather and reduce-scatter overlapped with the linears' products, round the
  /// tp group a shard at a time: the same as sequence_parallelism_mode "ring".
  bool enable_sequence_overlap = false;
  bool parallel_output = true;
  int64_t make_vocab_size_divisible_by = 64;  // a vocabulary-parallel head's padding (Colossal-AI's default)
  int64_t num_microbatches = 0;  // 0: None
  int64_t microbatch_size = 0;   // 0: None
  double max_norm = 0;  // clipped by HybridParallelOptimizer (replicated parameters counted once)
  bool broadcast_buffers = true;
  double ddp_bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool check_reduction = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  std::string custom_policy;               // a registered policy's name ("" : the model's built-in one)
  std::shared_ptr<shardformer::Policy> custom_policy_object;  // from code (takes precedence)
  std::string pp_style = "1f1b";
  int num_model_chunks = 1;
  std::vector<int64_t> num_layers_per_stage;  // empty: None (distribute_layers)
  // gradient_checkpoint_config.gradient_checkpointing_ratio (shardformer's GradientCheckpointConfig):
  // the share of each stage's layers a model with gradient checkpointing enabled
  // (model.gradient_checkpointing_enable()) runs checkpointed; 0: None (the model's own).
  double gradient_checkpointing_ratio = 0.0;
  std::string partition_method = "uniform";  // or "balanced" (by parameter count; legacy Colossal-AI's)
  bool enable_metadata_cache = true;
  bool dp_outside = true;
  bool overlap_p2p = true;
  /// The ZeRO engine's options (precision and loss scaling serve zero_stage 0 too), bound to
  /// Colossal-AI's keys: precision, zero_stage, zero_bucket_size_in_m, cpu_offload,
  /// communication_dtype, overlap_communication, overlap_allgather, the loss-scale ones.
  zero::ZeroOptions zero = zero_defaults();

  /// Colossal-AI's defaults for HybridParallelPlugin: zero_stage 0, initial_scale 2**16.
  static zero::ZeroOptions zero_defaults();
  /// Reads a [plugin] table (name = "hybrid_parallel"); unknown keys and wrong types refused.
  static HybridParallelOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// Throws ValueError naming the first bad argument (world-size checks come with the plugin).
  void validate() const;
};

class HybridParallelPlugin : public Plugin {
 public:
  explicit HybridParallelPlugin(HybridParallelOptions opts);
  std::string name() const override { return "hybrid_parallel"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16", "fp32"}; }
  bool control_precision() const override { return true; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }
  bool support_pipeline() const override { return opts_.pp_size > 1; }
  kernels::FusedKernels fused_kernels() const override { return opts_.fused_kernels(); }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  /// One training step (or, with gradients off, a forward) of a batch through the pipeline;
  /// loss and outputs on the last stage.
  PipelineResult execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                  OptimizerWrapper* optimizer, bool return_loss, bool return_outputs) override;
  const HybridParallelOptions& options() const { return opts_; }
  /// What the last execute_pipeline measured on this stage (pp_size > 1), else null.
  const pipeline::PipelineStepStats* pipeline_stats() const { return schedule_ ? &schedule_->last_step_stats() : nullptr; }
  /// The pipeline schedule (null without a pipeline, or before boost).
  const pipeline::PipelineSchedule* pipeline_schedule() const { return schedule_.get(); }
  /// The stage manager (pp_size > 1), else null.
  const pipeline::PipelineStageManager* stage_manager() const { return stages_.get(); }
  int tp_size() const { return opts_.tp_size; }
  int pp_size() const { return opts_.pp_size; }
  const dist::ProcessGroupMesh& mesh() const { return *mesh_; }
  /// The 2D / 2.5D / 3D grid of the tp group, or null (1D).
  const nn::TensorGrid* grid() const { return grid_.get(); }

 protected:
  std::pair<int, int> dp_rank_size() const override;

 private:
  LayoutCheckpointIO checkpoint_io_;
  HybridParallelOptions opts_;
  /// The tokens split over an sp axis: sequence_parallelism_mode all_to_all (Ulysses) or ring_attn.
  bool sp_axis() const;
  /// The group gradients are synchronized over: dp, or dp x sp under Ulysses and ring attention.
  const dist::ProcessGroup& grad_group() const;
  /// Keeps this stage's layers: releases every other tensor and drops it from the optimizer.
  void keep_stage_layers(BoostedObjects& o);

  std::shared_ptr<dist::ProcessGroupMesh> mesh_;
  std::shared_ptr<nn::TensorGrid> grid_;  // tp_mode 2d, 2.5d, 3d
  std::unique_ptr<pipeline::PipelineStageManager> stages_;
  std::unique_ptr<pipeline::PipelineSchedule> schedule_;
};

}  // namespace booster::plugins
