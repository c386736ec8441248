// GalvatronPlugin (PKU-DAIR's Galvatron, under its argument names): layerwise hybrid
// parallelism. One global pipeline degree; each transformer layer its own tensor-parallel
// degree and group (consecutive or strided ranks of its stage), or Ulysses sequence
// parallelism over the same ranks (use_sp: whole weights, tokens split, the attention's heads
// exchanged for tokens), its own data-parallel kind over the complement group (the whole
// stage under Ulysses; DDP, ZeRO-2, or ZeRO-3 from the ZeRO engine) and optional
// activation checkpointing; the embeddings and the head take the vocab degree vtp (tensor
// parallel, or with vsp whole weights on the group's rows, data parallel over the stage). The
// plan comes from a strategy JSON (galvatron_config_path, Galvatron's keys; galvatron_search
// writes one) or from the global-mode arguments (pp_deg, global_tp_deg, global_tp_consec,
// use_ulysses, sequence_parallel, sdp, global_checkpoint, chunks, pipeline_type,
// default_dp_type, vocab_tp, vocab_sp, embed_sdp).
// Activations move between layers whose groups differ (GalvatronLayer); every parameter
// is one part of one ZeRO engine placed on its layer's data-parallel group, so the step,
// loss scaling, clipping, no_sync and checkpoints are the engine's: a checkpoint written
// under a plan loads under any other plugin and layout, and back.
#pragma once

#include <memory>
#include <string>

#include "booster/grad_scaler.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "pipeline/schedule.h"
#include "plugins/galvatron/layerwise.h"
#include "galvatron/plan.h"

namespace booster::plugins {

struct GalvatronOptions {
  std::string galvatron_config_path;  // a strategy JSON ("": global mode)
  int pp_deg = 1;
  int global_tp_deg = 1;
  bool global_tp_consec = true;
  bool use_ulysses = false;        // every layer Ulysses of degree global_tp_deg instead of tensor parallel
  /// Galvatron's --sequence-parallel (Megatron-SP): every tensor-parallel layer runs its
  /// LayerNorms, dropouts and residuals on token shards (gathered for the column-parallel
  /// linears, reduce-scattered after the row-parallel ones), in global and layerwise mode.
  bool sequence_parallel = false;
  bool sdp = false;                // ZeRO-3 on every layer
  bool global_checkpoint = false;  // every layer checkpointed
  int64_t chunks = -1;             // micro-batches a step (-1: micro-batches of 4 rows when pp_deg > 1, else 1)
  std::string pipeline_type = "pipedream_flush";  // or gpipe
  std::string default_dp_type = "ddp";            // ddp, zero2 (or zero3)
  int vocab_tp = 1;                // vtp: the embeddings' and the head's tensor-parallel degree
  bool vocab_sp = false;           // vsp: vocab_tp is a Ulysses degree (whole weights, the group's rows)
  bool embed_sdp = false;
  int64_t global_train_batch_size = 0;  // global_bsz (0: the run's)
  std::string mixed_precision = "bf16";  // fp32, fp16 or bf16 (Galvatron's default)
  double reduce_bucket_size_in_m = 12;
  std::string custom_policy;  // a registered shardformer policy ("": the model's own)
  GradScalerOptions scaler{65536.0, 1, 2, 0.5, 1000, 2, 4294967296.0};

  /// Reads a [plugin] table (name = "galvatron"); unknown keys and wrong types refused.
  static GalvatronOptions from_config(const Config& cfg, const std::string& table = "plugin");
  void validate() const;
  /// The plan for a model of num_layers transformer layers: the strategy file's (which
  /// overrides the global arguments, as Galvatron's runtime does) or the global one.
  galvatron::HybridPlan plan(int64_t num_layers) const;
};

class GalvatronPlugin : public Plugin {
 public:
  explicit GalvatronPlugin(GalvatronOptions opts);
  std::string name() const override { return "galvatron"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16", "fp32"}; }
  bool control_precision() const override { return true; }
  std::string precision_option() const override { return "mixed_precision"; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }
  bool support_pipeline() const override { return pp_deg_ > 1; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  PipelineResult execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                  OptimizerWrapper* optimizer, bool return_loss, bool return_outputs) override;
  const GalvatronOptions& options() const { return opts_; }
  int64_t global_batch_size() const override { return plan_.global_bsz; }
  /// The plan boost() ran (after configure).
  const galvatron::HybridPlan& plan() const { return plan_; }
  const galvatron::LayerGroups& groups() const { return *groups_; }
  /// What the last execute_pipeline measured on this stage (pp_deg > 1), else null.
  const pipeline::PipelineStepStats* pipeline_stats() const { return schedule_ ? &schedule_->last_step_stats() : nullptr; }

 protected:
  /// The data-parallel share of the input: the embeddings' layout (vtp, consecutive).
  std::pair<int, int> dp_rank_size() const override;

 private:
  LayoutCheckpointIO checkpoint_io_;
  void shard_layers(nn::Module& module, const nn::PipelineModule& pm);
  void wrap_layers(nn::Module& module, const nn::PipelineModule& pm, const nn::StageSpec& spec);
  GalvatronOptions opts_;
  galvatron::HybridPlan plan_;  // the file's, or the global template (one layer) until configure
  int pp_deg_, vtp_;
  std::shared_ptr<galvatron::LayerGroups> groups_;
  std::unique_ptr<pipeline::PipelineStageManager> stages_;
  std::unique_ptr<pipeline::PipelineSchedule> schedule_;
};

}  // namespace booster::plugins
