// HybridParallelPlugin (see hybrid_parallel_plugin.h).
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"

#include <spdlog/spdlog.h>

#include "booster/auto_precision.h"
#include "booster/mixed_precision.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "plugins/hybrid_parallel/hybrid_parallel_module.h"
#include "shardformer/tensor_parallel_optimizer.h"
#include "zero/model.h"
#include "booster/plugin_options.h"
#include "ddp/ddp_model.h"
#include "nn/causal_lm.h"

namespace booster::plugins {

HybridParallelOptions HybridParallelOptions::from_config(const Config& cfg, const std::string& t) {
  using O = HybridParallelOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("tp_size", &O::tp_size, "tensor-parallel size")
        .add("tp_mode", &O::tp_mode, "1d, 2d, 2.5d or 3d")
        .add("tp_depth", &O::tp_depth, "2.5d: the grid's depth (tp_size = q^2 x tp_depth)")
        .add("pp_size", &O::pp_size, "pipeline stages")
        .add("sp_size", &O::sp_size, "sequence-parallel size (0: None)")
        .add("precision", &O::zero, &zero::ZeroOptions::precision, "fp16, bf16, fp32 or auto")
        .add("zero_stage", &O::zero, &zero::ZeroOptions::stage, "0, 1 or 2")
        .add("enable_all_optimization", &O::enable_all_optimization)
        .add("enable_fused_normalization", &O::enable_fused_normalization)
        .add("enable_flash_attention", &O::enable_flash_attention)
        .add("enable_jit_fused", &O::enable_jit_fused)
        .add("enable_sequence_parallelism", &O::enable_sequence_parallelism)
        .add("sequence_parallelism_mode", &O::sequence_parallelism_mode,
             "split_gather, ring, all_to_all or ring_attn (\"\": split_gather when enabled)")
        .add("enable_sequence_overlap", &O::enable_sequence_overlap, "split_gather's communication overlapped (mode ring)")
        .add("parallel_output", &O::parallel_output, "vocabulary-parallel logits stay split (false: gathered)")
        .add("make_vocab_size_divisible_by", &O::make_vocab_size_divisible_by)
        .add("num_microbatches", &O::num_microbatches, "0: None")
        .add("microbatch_size", &O::microbatch_size, "0: None")
        .add("max_norm", &O::max_norm)
        .add("broadcast_buffers", &O::broadcast_buffers)
        .add("ddp_bucket_cap_mb", &O::ddp_bucket_cap_mb)
        .add("find_unused_parameters", &O::find_unused_parameters)
        .add("check_reduction", &O::check_reduction)
        .add("gradient_as_bucket_view", &O::gradient_as_bucket_view)
        .add("static_graph", &O::static_graph)
        .add("zero_bucket_size_in_m", &O::zero, &zero::ZeroOptions::reduce_bucket_size_in_m)
        .add("cpu_offload", &O::zero, &zero::ZeroOptions::cpu_offload, "ZeRO masters and optimizer states on local disk")
        .add("offload_dir", &O::zero, &zero::ZeroOptions::offload_dir, "folder of the disk tier (\"\": default_offload_dir(), the run's)")
        .add("communication_dtype", &O::zero, &zero::ZeroOptions::communication_dtype, "\"\" (the gradients'), fp16, bf16 or fp32")
        .add("overlap_communication", &O::zero, &zero::ZeroOptions::overlap_communication)
        .add("custom_policy", &O::custom_policy, "a registered shardformer policy (\"\": the model's own)")
        .add("pp_style", &O::pp_style, "1f1b, interleaved or zbv")
        .add("num_model_chunks", &O::num_model_chunks)
        .add("num_layers_per_stage", &O::num_layers_per_stage, "layers of each stage chunk ([]: None)")
        .add("partition_method", &O::partition_method, "uniform or balanced (by parameter count)")
        .add("gradient_checkpoint_config.gradient_checkpointing_ratio", &O::gradient_checkpointing_ratio,
             "share of each stage's layers checkpointed when the model enables it (0: None)")
        .add("enable_metadata_cache", &O::enable_metadata_cache)
        .add("dp_outside", &O::dp_outside)
        .add("overlap_p2p", &O::overlap_p2p)
        .add("overlap_allgather", &O::zero, &zero::ZeroOptions::overlap_allgather);
    return bind_loss_scale<O>(b, [](O& o) -> GradScalerOptions& { return o.zero.scaler; });
  }();
  return options_from(cfg, t, "hybrid_parallel", binder);
}

zero::ZeroOptions HybridParallelOptions::zero_defaults() {
  zero::ZeroOptions z;
  z.stage = 0;
  z.scaler.initial_scale = 65536.0;  // 2**16, as Colossal-AI's HybridParallelPlugin
  return z;
}

void HybridParallelOptions::validate() const {
  const char* who = "HybridParallelPlugin: ";
  BOOSTER_CHECK(tp_size >= 1, who, "tp_size must be >= 1, got ", tp_size);
  BOOSTER_CHECK(pp_size >= 1, who, "pp_size must be >= 1, got ", pp_size);
  if (tp_mode == "1d") {
    BOOSTER_CHECK(tp_depth == 1, who, "tp_depth ", tp_depth, " needs tp_mode = \"2.5d\"");
  } else {
    nn::TensorGrid::edge(tp_mode, tp_size, tp_depth);  // throws naming the mode and the size
    BOOSTER_CHECK(!enable_sequence_parallelism, who, "enable_sequence_parallelism runs with tp_mode 1d; tp_mode ",
                  tp_mode, " partitions the activations itself");
  }
  zero.validate_common(who);
  BOOSTER_CHECK(zero.stage >= 0 && zero.stage <= 2, who, "zero_stage must be 0, 1 or 2, got ", zero.stage);
  BOOSTER_CHECK(!enable_jit_fused, who, "enable_jit_fused: there is no fused bias + GELU or dropout + add kernel "
                "here (the linears add their bias inside oneDNN's product, GELU and dropout are one pass each); leave "
                "it false (enable_all_optimization turns on the fused attention and normalization there are)");
  const std::string& m = sequence_parallelism_mode;
  BOOSTER_CHECK(!enable_sequence_parallelism || m != "ring_attn" || fused_kernels().attention, who,
                "sequence_parallelism_mode ring_attn is blockwise FlashAttention by construction: it has no plain "
                "form for enable_flash_attention = false");
  BOOSTER_CHECK(m.empty() || m == "split_gather" || m == "ring" || m == "all_to_all" || m == "ring_attn", who,
                "sequence_parallelism_mode must be one of split_gather, ring, all_to_all, ring_attn, got '", m, "'");
  if (enable_sequence_parallelism) {
    BOOSTER_CHECK(!enable_sequence_overlap || m == "split_gather" || m == "ring", who, "enable_sequence_overlap overlaps ",
                  "split_gather's communication with the linears (mode ring); sequence_parallelism_mode ", m,
                  " has no gather around the linears to overlap");
    if (m == "split_gather" || m == "ring") {
      BOOSTER_CHECK(tp_size > 1, who, "sequence_parallelism_mode ", m, " shards over the tensor-parallel group and "
                    "needs tp_size > 1, got tp_size ", tp_size);
      BOOSTER_CHECK(sp_size == 0 || sp_size == 1 || sp_size == tp_size, who, "sp_size ", sp_size, " with ", m,
                    ": the sequence is split over the tp group (leave sp_size unset)");
    } else {
      BOOSTER_CHECK(sp_size > 1, who, "sequence_parallelism_mode ", m, m == "all_to_all" ? " (Ulysses)" : " (ring attention)",
                    " splits the sequence over sp_size ranks; set sp_size > 1, got ", sp_size);
      BOOSTER_CHECK(tp_size == 1, who, "sequence_parallelism_mode ", m, " runs on whole weights here (tp_size 1), ",
                    "got tp_size ", tp_size);
    }
  } else {
    BOOSTER_CHECK(sp_size == 0 || sp_size == 1, who, "sp_size ", sp_size,
                  " needs enable_sequence_parallelism = true");
    BOOSTER_CHECK(!enable_sequence_overlap, who, "enable_sequence_overlap needs enable_sequence_parallelism = true");
  }
  BOOSTER_CHECK(num_microbatches >= 0, who, "num_microbatches must be >= 0 (0: None), got ", num_microbatches);
  BOOSTER_CHECK(microbatch_size >= 0, who, "microbatch_size must be >= 0 (0: None), got ", microbatch_size);
  BOOSTER_CHECK(num_model_chunks >= 1, who, "num_model_chunks must be >= 1, got ", num_model_chunks);
  if (pp_size > 1) {
    BOOSTER_CHECK(pp_style == "1f1b" || pp_style == "interleaved" || pp_style == "zbv", who,
                  "pp_style must be one of 1f1b, interleaved, zbv, got '", pp_style, "'");
    BOOSTER_CHECK(pp_style != "1f1b" || num_model_chunks == 1, who, "pp_style 1f1b needs num_model_chunks = 1, got ",
                  num_model_chunks);
    BOOSTER_CHECK(pp_style != "interleaved" || num_model_chunks > 1, who,
                  "pp_style interleaved needs num_model_chunks > 1, got ", num_model_chunks);
    BOOSTER_CHECK(pp_style != "zbv" || num_model_chunks == 2, who, "pp_style zbv needs num_model_chunks = 2, got ",
                  num_model_chunks);
    BOOSTER_CHECK(num_microbatches > 0 || microbatch_size > 0, who,
                  "with pp_size > 1, set num_microbatches or microbatch_size");
    BOOSTER_CHECK(pp_style != "interleaved" || num_microbatches == 0 || num_microbatches % pp_size == 0, who,
                  "pp_style interleaved needs num_microbatches (", num_microbatches, ") to be a multiple of pp_size (",
                  pp_size, ")");
  }
  BOOSTER_CHECK(partition_method == "uniform" || partition_method == "balanced", who,
                "partition_method must be uniform or balanced, got '", partition_method, "'");
  BOOSTER_CHECK(num_layers_per_stage.empty() || partition_method == "uniform", who,
                "num_layers_per_stage and partition_method balanced both say how to split the layers; give one");
  BOOSTER_CHECK(ddp_bucket_cap_mb > 0, who, "ddp_bucket_cap_mb must be positive, got ", ddp_bucket_cap_mb);
  BOOSTER_CHECK(zero.reduce_bucket_size_in_m > 0, who, "zero_bucket_size_in_m must be positive, got ",
                zero.reduce_bucket_size_in_m);
  BOOSTER_CHECK(max_norm >= 0, who, "max_norm must be >= 0, got ", max_norm);
  BOOSTER_CHECK(make_vocab_size_divisible_by >= 1, who, "make_vocab_size_divisible_by must be >= 1, got ",
                make_vocab_size_divisible_by);
  BOOSTER_CHECK(gradient_checkpointing_ratio >= 0 && gradient_checkpointing_ratio <= 1, who,
                "gradient_checkpoint_config.gradient_checkpointing_ratio must be in [0, 1], got ",
                gradient_checkpointing_ratio);
  BOOSTER_CHECK(!zero.cpu_offload || zero.stage > 0, who, "cpu_offload needs zero_stage 1 or 2");
}

HybridParallelPlugin::HybridParallelPlugin(HybridParallelOptions opts) : opts_(std::move(opts)) {
  if (opts_.enable_sequence_parallelism && opts_.sequence_parallelism_mode.empty())
    opts_.sequence_parallelism_mode = "split_gather";  // shardformer::ShardConfig's default
  // "auto": what this CPU runs faster, measured once a process (booster/auto_precision.h).
  opts_.zero.precision = resolve_precision(opts_.zero.precision);
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "HybridParallelPlugin: call dist::launch_from_openmpi() before creating the plugin");
  if (dist::world_rank() == 0) {
    const auto f = opts_.fused_kernels();
    spdlog::info("HybridParallelPlugin: attention {}, normalization {} (enable_flash_attention and "
                 "enable_fused_normalization default to true here, Colossal-AI's to false; false runs the plain ops)",
                 f.attention ? "fused" : "as plain ops (score product, softmax, context product)",
                 f.normalization ? "fused" : "as plain ops (mean, variance, rsqrt)");
  }
  const int world = dist::world_size(), tp = opts_.tp_size, pp = opts_.pp_size, sp = sp_axis() ? opts_.sp_size : 1;
  BOOSTER_CHECK(world % (tp * pp * sp) == 0, "HybridParallelPlugin: the world size ", world,
                " is not divisible by tp_size ", tp, " x pp_size ", pp, sp > 1 ? " x sp_size " + std::to_string(sp) : "");
  // (dp, pp, sp, tp), or (pp, dp, sp, tp): the sp ranks (Ulysses', ring attention's) consecutive, inside each
  // data-parallel replica.
  const int dp = world / (tp * pp * sp);
  std::vector<std::pair<std::string, int>> axes = {{"dp", dp}, {"pp", pp}, {"sp", sp}, {"tp", tp}};
  if (!opts_.dp_outside) std::swap(axes[0], axes[1]);
  mesh_ = std::make_shared<dist::ProcessGroupMesh>(axes);
  if (opts_.tp_mode != "1d") {
    grid_ = std::make_shared<nn::TensorGrid>(mesh_->group("tp"), opts_.tp_mode, opts_.tp_depth);
    grid_->set_pad_rows(pp == 1);  // a pipeline's stages cannot tell the padding apart: its micro-batches must divide
  }
}

void HybridParallelPlugin::keep_stage_layers(BoostedObjects& o) {
  auto module = o.model->module();
  auto* pm = dynamic_cast<nn::PipelineModule*>(module.get());
  BOOSTER_CHECK(pm != nullptr, "HybridParallelPlugin: pp_size ", opts_.pp_size, " needs a model that runs as pipeline "
                "stages (nn::PipelineModule: ViTForImageClassification, Sequential); a ", module->type_name(), " does not");
  std::vector<int64_t> per_slot = opts_.num_layers_per_stage;
  const int slots = opts_.pp_size * opts_.num_model_chunks;
  if (opts_.partition_method == "balanced") {
    // Parameters per layer, the largest over the pipeline group: the same split whether
    // every rank holds the whole model or a stage only its layers (a stage boosted again).
    std::vector<int64_t> counts;
    for (int64_t i = 0; i < pm->num_pipeline_layers(); ++i) {
      int64_t n = 0;
      for (auto& path : pm->stage_modules({i, i + 1, false, false}))
        for (auto& [name, p] : module->get(path)->named_parameters()) n += p.numel();
      counts.push_back(n);
    }
    Tensor w = Tensor::from_ints(counts, {int64_t(counts.size())});
    dist::all_reduce(w, dist::ReduceOp::max, mesh_->group("pp"));
    std::vector<int64_t> weights;
    for (int64_t i = 0; i < w.numel(); ++i) weights.push_back(std::max<int64_t>(w.data<int64_t>()[i], 1));
    per_slot = pipeline::partition_balanced(weights, slots);
  }
  stages_ = std::make_unique<pipeline::PipelineStageManager>(mesh_->group("pp"), opts_.num_model_chunks, per_slot,
                                                             opts_.pp_style == "zbv");
  pipeline::keep_stage_modules(*module, *pm, *stages_, o.optimizer.get());
  pipeline::ScheduleOptions so;
  so.num_microbatches = opts_.num_microbatches;
  so.microbatch_size = opts_.microbatch_size;
  so.enable_metadata_cache = opts_.enable_metadata_cache;
  so.overlap_p2p = opts_.overlap_p2p;
  if (grid_) so.rows_multiple = grid_->row_blocks(), so.rows_owner = grid_->describe();
  if (opts_.pp_style == "interleaved") schedule_ = std::make_unique<pipeline::InterleavedSchedule>(*stages_, so);
  else if (opts_.pp_style == "zbv") schedule_ = std::make_unique<pipeline::ZeroBubbleVSchedule>(*stages_, so);
  else schedule_ = std::make_unique<pipeline::OneForwardOneBackwardSchedule>(*stages_, so);
}

PipelineResult HybridParallelPlugin::execute_pipeline(const DataIter& data_iter, ModelWrapper& model,
                                                      const StageCriterion& criterion, OptimizerWrapper* optimizer,
                                                      bool return_loss, bool return_outputs) {
  if (opts_.pp_size == 1) return Plugin::execute_pipeline(data_iter, model, criterion, optimizer, return_loss, return_outputs);
  BOOSTER_CHECK(schedule_ != nullptr, "HybridParallelPlugin.execute_pipeline: boost the model first");
  return schedule_->forward_backward_step(model, data_iter, criterion, optimizer, return_loss, return_outputs);
}

namespace {
// Sets gradient_checkpointing_ratio on every module that has one (the ViT's encoder).
void set_checkpointing_ratio(nn::Module& root, double ratio) {
  int found = 0;
  for (auto& [path, m] : root.named_modules()) {
    const auto names = m->attribute_names();
    if (std::find(names.begin(), names.end(), "gradient_checkpointing_ratio") == names.end()) continue;
    m->set_attribute("gradient_checkpointing_ratio", ratio);
    ++found;
  }
  BOOSTER_CHECK(found > 0, "HybridParallelPlugin: gradient_checkpoint_config is set, but no module of the ",
                root.type_name(), " has a gradient_checkpointing_ratio attribute (a ViT's encoder has one)");
}
}  // namespace

bool HybridParallelPlugin::sp_axis() const {
  const std::string& m = opts_.sequence_parallelism_mode;
  return opts_.enable_sequence_parallelism && (m == "all_to_all" || m == "ring_attn");
}

const dist::ProcessGroup& HybridParallelPlugin::grad_group() const {
  return sp_axis() ? mesh_->group(std::vector<std::string>{"dp", "sp"}) : mesh_->group("dp");
}

std::pair<int, int> HybridParallelPlugin::dp_rank_size() const {
  return {mesh_->coordinate("dp"), mesh_->size("dp")};
}

void HybridParallelPlugin::configure(BoostedObjects& o) {
  auto module = o.model->module();
  const auto& dp = grad_group();  // Ulysses, ring attention: the sp ranks are data parallel too
  const auto& tp = mesh_->group("tp");
  BOOSTER_CHECK(!(opts_.pp_size > 1 && opts_.enable_sequence_parallelism) || dynamic_cast<nn::CausalLM*>(module.get()),
                "HybridParallelPlugin: sequence parallelism with pp_size > 1 runs for language models (their token ",
                "split spans the stages); a ", module->type_name(), " runs it without a pipeline");
  // Every rank starts from world rank 0's weights: a pipeline group takes its first stage's
  // (every rank holds the whole model until its stage keeps its layers), a tensor-parallel
  // group agrees on the whole tensors before they are cut, then DDP or ZeRO makes each dp
  // group agree on what its ranks hold (the first tp group's).
  if (opts_.gradient_checkpointing_ratio > 0) set_checkpointing_ratio(*module, opts_.gradient_checkpointing_ratio);
  if (opts_.pp_size > 1) broadcast_module_state(*module, mesh_->group("pp"), true, true);
  broadcast_module_state(*module, tp, true);
  if (opts_.tp_size > 1 || sp_axis()) {
    std::shared_ptr<shardformer::Policy> policy = opts_.custom_policy_object
                                         ? opts_.custom_policy_object
                                         : !opts_.custom_policy.empty() ? shardformer::make_policy(opts_.custom_policy) : shardformer::auto_policy(*module);
    BOOSTER_CHECK(policy != nullptr, "HybridParallelPlugin: no shardformer policy for a ", module->type_name(),
                  " model; write one and pass it as custom_policy (register_policy gives it a name for configs)");
    shardformer::ShardConfig sc;
    sc.tensor_parallel_process_group = &tp;
    sc.sequence_parallel_process_group = &mesh_->group("sp");
    sc.enable_sequence_parallelism = opts_.enable_sequence_parallelism;
    sc.sequence_parallelism_mode = opts_.sequence_parallelism_mode;
    sc.enable_sequence_overlap = opts_.enable_sequence_overlap;
    sc.parallel_output = opts_.parallel_output;
    sc.make_vocab_size_divisible_by = opts_.make_vocab_size_divisible_by;
    sc.grid = grid_.get();
    const uint64_t seed = default_generator().state().seed;
    sc.replicated_generator = std::make_shared<Generator>(seed, (uint64_t(1) << 32) + uint64_t(mesh_->coordinate("dp")));
    sc.parallel_generator = std::make_shared<Generator>(seed, (uint64_t(2) << 32) + uint64_t(dist::world_rank()));
    shardformer::shard_model(*module, *policy, sc);
  }
  if (opts_.pp_size > 1) keep_stage_layers(o);
  if (opts_.zero.stage == 0) {
    const ddp::ReducerOptions r{opts_.ddp_bucket_cap_mb, opts_.find_unused_parameters, opts_.gradient_as_bucket_view,
                                 "HybridParallelPlugin"};
    o.model = std::make_shared<ddp::TorchDDPModel>(o.model, dp, r, opts_.broadcast_buffers);
    if (opts_.zero.precision != "fp32") apply_mixed_precision(o, {opts_.zero.precision, opts_.zero.scaler, true});
  } else {
    zero::apply_zero(o, dp, opts_.zero);  // its max_norm stays 0: HybridParallelOptimizer clips
  }
  o.model = std::make_shared<HybridParallelModule>(o.model, mesh_, stages_ ? stages_->stage() : -1, grid_);
  if (o.optimizer) {
    auto hpo = std::make_shared<shardformer::HybridParallelOptimizer>(o.optimizer, mesh_, opts_.max_norm, grid_ != nullptr);
    if (auto* pm = dynamic_cast<nn::PipelineModule*>(module.get()); pm && stages_)  // the first stage counts a tied head
      hpo->count_elsewhere(pipeline::tied_copies(*module, *pm, *stages_));
    o.optimizer = hpo;
    if (auto* zbv = dynamic_cast<pipeline::ZeroBubbleVSchedule*>(schedule_.get()))  // its costs go with the checkpoint
      o.optimizer = std::make_shared<pipeline::ZeroBubbleCostsState>(o.optimizer, *zbv);
  }
}

std::shared_ptr<CheckpointIO> HybridParallelPlugin::get_checkpoint_io() { return checkpoint_io_.get(name(), mesh_->size("dp"), opts_.tp_size, opts_.pp_size, opts_.zero.precision); }

}  // namespace booster::plugins
