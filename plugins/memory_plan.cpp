// What a run config's plugin does to memory (see memory_plan.h).
#include "plugins/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "booster/auto_precision.h"
#include "core/common/check.h"
#include "nn/pipeline.h"
#include "plugins/galvatron/galvatron_plugin.h"
#include "plugins/gemini/gemini_plugin.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/torch_ddp/torch_ddp_plugin.h"
#include "plugins/torch_fsdp/torch_fsdp_plugin.h"

namespace booster::plugins {

using galvatron::HybridPlan;
using galvatron::LayerStrategy;

namespace {

// The same strategy on every layer, in `pp` stages.
HybridPlan uniform(int64_t layers, const LayerStrategy& s, const std::string& dp_type, int pp = 1) {
  HybridPlan p;
  p.pp_deg = pp;
  p.layers.assign(size_t(layers), s);
  p.default_dp_type = dp_type;
  return p;
}

// The first floor(ratio x a stage's layers) layers of each stage checkpointed (run_layers' rule).
void checkpoint_first(HybridPlan& p, double ratio) {
  if (ratio <= 0) return;
  int64_t first = 0;
  for (int64_t n : p.stage_layers()) {
    const int64_t k = int64_t(ratio * double(n) + 1e-9);
    for (int64_t l = first; l < first + k; ++l) p.layers[size_t(l)].checkpoint = true;
    first += n;
  }
}

// The parameters' sizes, last first (the order backward finishes them: Gemini packs them so).
std::vector<int64_t> backward_numels(const nn::Module& model) {
  std::vector<int64_t> n;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) n.push_back(p.numel());
  std::reverse(n.begin(), n.end());
  return n;
}

int64_t total_params(const nn::Module& model) {
  int64_t n = 0;
  for (auto& [name, p] : model.named_parameters()) n += p.numel();
  return n;
}

std::string zero_kind(int stage) { return stage == 0 ? "ddp" : "zero2"; }

// "run.toml:4: plugin.tp_mode:" (where the key was set, and the key).
std::string at(const Config& cfg, const std::string& key) {
  const std::string w = cfg.where(key);  // "--set plugin.tp_mode" names it already
  return w.find(key) != std::string::npos ? w + ":" : w + ": " + key + ":";
}

}  // namespace

MemoryPlan memory_plan(const Config& cfg, const std::string& table, const nn::Module& model, int world, int64_t batch,
                       double checkpoint_ratio, const std::string& booster_precision) {
  BOOSTER_CHECK(world >= 1, "memory_plan: the world must have a rank, got ", world);
  BOOSTER_CHECK(batch >= 1, "memory_plan: the batch must have a row, got ", batch);
  const auto* pm = dynamic_cast<const nn::PipelineModule*>(&model);
  BOOSTER_CHECK(pm != nullptr, "memory_plan: the ", model.type_name(), " has no transformer layers the cost model "
                "knows (it is not an nn::PipelineModule)");
  const int64_t layers = pm->num_pipeline_layers();
  const std::string name = cfg.has(table + ".name") ? cfg.get_string(table + ".name") : "";
  MemoryPlan out;
  int dp = world;  // the replicas that take `batch` rows each
  if (name.empty() || name == "torch_ddp") {
    if (!name.empty()) TorchDDPOptions::from_config(cfg, table);  // its keys checked
    out.plan = uniform(layers, {}, "ddp");
    out.precision = resolve_precision(booster_precision.empty() ? "fp32" : booster_precision);
    out.what = (name.empty() ? "no plugin" : "torch_ddp") + std::string(": every layer data parallel (DDP)");
  } else if (name == "low_level_zero") {
    const auto o = LowLevelZeroOptions::from_config(cfg, table);
    out.plan = uniform(layers, {}, "zero2");
    out.precision = resolve_precision(o.precision);
    out.offload_states = o.cpu_offload;
    out.what = "low_level_zero: ZeRO-" + std::to_string(o.stage) + " over " + std::to_string(world) + " ranks";
  } else if (name == "gemini") {
    const auto o = GeminiOptions::from_config(cfg, table);
    BOOSTER_CHECK(o.placement_policy == "static" && !o.keep_gathered && o.shard_param_frac == 1.0 &&
                      o.offload_param_frac == 0.0 && (o.offload_optim_frac == 0.0 || o.offload_optim_frac == 1.0),
                  at(cfg, table + ".placement_policy"), " the memory estimate models Gemini with every chunk "
                  "sharded in RAM (placement_policy \"static\", shard_param_frac 1, offload_param_frac 0, "
                  "offload_optim_frac 0 or 1, keep_gathered false)");
    out.plan = uniform(layers, {1, true, true}, "zero2");
    out.plan.embed_sdp = true;
    out.precision = resolve_precision(o.zero.precision);
    out.zero3_unit_params = double(gemini_chunk_elems(o, backward_numels(model)));
    out.offload_states = o.offload_optim_frac == 1.0;
    out.what = "gemini: ZeRO-3, chunks of " + std::to_string(int64_t(out.zero3_unit_params)) + " elements";
  } else if (name == "torch_fsdp") {
    const auto o = TorchFSDPOptions::from_config(cfg, table);
    out.precision = resolve_precision(o.param_dtype);
    out.offload_states = o.cpu_offload;
    BOOSTER_CHECK(!o.cpu_offload || o.sharding_strategy == "FULL_SHARD", at(cfg, table + ".cpu_offload"),
                  " the memory estimate models cpu_offload under FULL_SHARD only");
    if (o.sharding_strategy == "FULL_SHARD") {
      const auto units = fsdp_units(model, o);
      const auto params = fsdp_unit_params(model, units);
      out.plan = uniform(layers, {1, true, true}, "zero2");
      out.plan.embed_sdp = true;
      // A gather fetches one unit: the root's own parameters, or the largest below it (a
      // unit holding a layer's gathers no more than the layer).
      out.zero3_unit_params = units.size() == 1 ? double(total_params(model)) : double(*std::max_element(params.begin(), params.end()));
      out.what = "torch_fsdp: FULL_SHARD (ZeRO-3), " + describe_fsdp_units(units, params, o);
    } else {
      out.plan = uniform(layers, {}, o.sharding_strategy == "NO_SHARD" ? "ddp" : "zero2");
      out.what = "torch_fsdp: " + o.sharding_strategy + (o.sharding_strategy == "NO_SHARD" ? " (DDP)" : " (ZeRO-2)");
    }
  } else if (name == "hybrid_parallel") {
    const auto o = HybridParallelOptions::from_config(cfg, table);
    BOOSTER_CHECK(o.tp_mode == "1d", at(cfg, table + ".tp_mode"), " the memory estimate models 1D tensor "
                  "parallelism only, got tp_mode \"", o.tp_mode, "\"");
    BOOSTER_CHECK(o.pp_style != "interleaved" || o.num_model_chunks == 1, at(cfg, table + ".pp_style"),
                  " the memory estimate models the 1F1B schedule, not the interleaved one");
    const bool ulysses = o.enable_sequence_parallelism && o.sequence_parallelism_mode == "all_to_all";
    BOOSTER_CHECK(!o.enable_sequence_parallelism || ulysses || o.sequence_parallelism_mode.empty() ||
                      o.sequence_parallelism_mode == "split_gather",
                  at(cfg, table + ".sequence_parallelism_mode"), " the memory estimate models split_gather and "
                  "all_to_all (Ulysses), not \"", o.sequence_parallelism_mode, "\"");
    BOOSTER_CHECK(!ulysses || o.tp_size == 1, at(cfg, table + ".sp_size"), " the memory estimate models "
                  "Ulysses without tensor parallelism beside it");
    const int tp = ulysses ? o.sp_size : o.tp_size;
    BOOSTER_CHECK(world % (tp * o.pp_size) == 0, at(cfg, table + ".tp_size"), " ", world, " ranks do not divide "
                  "into tp ", tp, " x pp_size ", o.pp_size);
    out.plan = uniform(layers, {tp, true, false, false, ulysses}, zero_kind(o.zero.stage), o.pp_size);
    // The embeddings and head run on the tensor-parallel group's rows (split over it: the
    // vocabulary-parallel embedding and head of the language models' policies).
    out.plan.vtp = tp;
    out.plan.vsp = ulysses;
    if (o.pp_size > 1) {
      BOOSTER_CHECK(o.num_microbatches > 0 || o.microbatch_size > 0, at(cfg, table + ".num_microbatches"),
                    " a pipeline needs num_microbatches or microbatch_size");
      out.plan.chunks = o.num_microbatches > 0 ? o.num_microbatches : std::max<int64_t>(1, batch / o.microbatch_size);
    }
    dp = world / (tp * o.pp_size);
    out.megatron_sp = o.enable_sequence_parallelism && !ulysses;
    out.precision = resolve_precision(o.zero.precision);
    out.offload_states = o.zero.cpu_offload;
    if (checkpoint_ratio > 0 && o.gradient_checkpointing_ratio > 0) checkpoint_ratio = o.gradient_checkpointing_ratio;
    out.what = "hybrid_parallel: tp " + std::to_string(o.tp_size) + (ulysses ? ", Ulysses sp " + std::to_string(tp) : "") +
               ", pp " + std::to_string(o.pp_size) + ", dp " + std::to_string(dp) + " (zero_stage " +
               std::to_string(o.zero.stage) + ")";
  } else if (name == "galvatron") {
    const auto o = GalvatronOptions::from_config(cfg, table);
    out.plan = o.plan(layers);
    dp = world / (out.plan.pp_deg * out.plan.vtp);
    out.precision = resolve_precision(o.mixed_precision);
    out.megatron_sp = o.sequence_parallel;
    out.what = "galvatron: " + out.plan.summary(world);
    checkpoint_ratio = 0;  // the plan says which layers are checkpointed
  } else {
    BOOSTER_THROW(ValueError, at(cfg, table + ".name"), " the memory estimate knows the plugins torch_ddp, "
                  "low_level_zero, gemini, torch_fsdp, hybrid_parallel and galvatron, not '", name, "'");
  }
  checkpoint_first(out.plan, checkpoint_ratio);
  if (out.plan.global_bsz == 0) out.plan.global_bsz = batch * dp;
  out.plan.world_size = world;
  out.dp = dp;
  BOOSTER_CHECK(out.plan.global_bsz % dp == 0, "memory_plan: the plan's global batch ", out.plan.global_bsz,
                " does not divide over ", dp, " data-parallel replicas");
  out.plan.validate(world, layers);
  return out;
}

}  // namespace booster::plugins
