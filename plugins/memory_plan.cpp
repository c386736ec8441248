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

std::string zero_kind(int stage) { return stage == 0 ? "ddp" : "zero2"; }

// "run.toml:4: plugin.tp_mode:" (where the key was set, and the key).
std::string at(const Config& cfg, const std::string& key) {
  const std::string w = cfg.where(key);  // "--set plugin.tp_mode" names it already
  return w.find(key) != std::string::npos ? w + ":" : w + ": " + key + ":";
}

// What every plugin's plan is made from.
struct Run {
  const Config& cfg;
  const std::string& table;
  const nn::Module& model;
  int64_t layers;
  int world;
  int64_t batch;
  double checkpoint_ratio;  // of each stage's layers (a plugin may override it)
};

// A plan whose data parallelism is the whole world (until a plugin says otherwise).
MemoryPlan blank(const Run& r) {
  MemoryPlan out;
  out.dp = r.world;
  return out;
}

MemoryPlan ddp_plan(Run& r, const std::string& name, const std::string& booster_precision) {
  if (!name.empty()) TorchDDPOptions::from_config(r.cfg, r.table);  // its keys checked
  MemoryPlan out = blank(r);
  out.plan = uniform(r.layers, {}, "ddp");
  out.ddp_buckets = !name.empty();  // without a plugin the Booster reduces nothing
  out.precision = resolve_precision(booster_precision.empty() ? "fp32" : booster_precision);
  out.what = (name.empty() ? "no plugin" : "torch_ddp") + std::string(": every layer data parallel (DDP)");
  return out;
}

MemoryPlan low_level_zero_plan(Run& r) {
  const auto o = LowLevelZeroOptions::from_config(r.cfg, r.table);
  MemoryPlan out = blank(r);
  out.plan = uniform(r.layers, {}, "zero2");
  out.precision = resolve_precision(o.precision);
  out.offload_states = o.cpu_offload;
  out.zero1 = o.stage == 1;
  out.what = "low_level_zero: ZeRO-" + std::to_string(o.stage) + " over " + std::to_string(r.world) + " ranks";
  return out;
}

// ZeRO-3 on every layer and on the embeddings and head, gathered `unit` parameters at a time.
MemoryPlan zero3_plan(const Run& r, double unit) {
  MemoryPlan out = blank(r);
  out.plan = uniform(r.layers, {1, true, true}, "zero2");
  out.plan.embed_sdp = true;
  out.zero3_unit_params = unit;
  return out;
}

MemoryPlan gemini_plan(Run& r) {
  const auto o = GeminiOptions::from_config(r.cfg, r.table);
  BOOSTER_CHECK(o.placement_policy == "static" && !o.keep_gathered && o.shard_param_frac == 1.0 &&
                    o.offload_param_frac == 0.0 && (o.offload_optim_frac == 0.0 || o.offload_optim_frac == 1.0),
                at(r.cfg, r.table + ".placement_policy"), " the memory estimate models Gemini with every chunk "
                "sharded in RAM (placement_policy \"static\", shard_param_frac 1, offload_param_frac 0, "
                "offload_optim_frac 0 or 1, keep_gathered false)");
  MemoryPlan out = zero3_plan(r, double(gemini_chunk_elems(o, backward_numels(r.model))));
  out.precision = resolve_precision(o.zero.precision);
  out.offload_states = o.offload_optim_frac == 1.0;
  out.what = "gemini: ZeRO-3, chunks of " + std::to_string(int64_t(out.zero3_unit_params)) + " elements";
  return out;
}

MemoryPlan torch_fsdp_plan(Run& r) {
  const auto o = TorchFSDPOptions::from_config(r.cfg, r.table);
  BOOSTER_CHECK(!o.cpu_offload || o.sharding_strategy == "FULL_SHARD", at(r.cfg, r.table + ".cpu_offload"),
                " the memory estimate models cpu_offload under FULL_SHARD only");
  MemoryPlan out = blank(r);
  if (o.sharding_strategy == "FULL_SHARD") {
    const auto units = fsdp_units(r.model, o);
    const auto params = fsdp_unit_params(r.model, units);
    // A gather fetches one unit: the root's own parameters, or the largest below it (a
    // unit holding a layer's gathers no more than the layer).
    out = zero3_plan(r, units.size() == 1 ? double(nn::parameter_count(r.model))
                                          : double(*std::max_element(params.begin(), params.end())));
    out.what = "torch_fsdp: FULL_SHARD (ZeRO-3), " + describe_fsdp_units(units, params, o);
  } else {
    out.plan = uniform(r.layers, {}, o.sharding_strategy == "NO_SHARD" ? "ddp" : "zero2");
    out.ddp_buckets = o.sharding_strategy == "NO_SHARD";
    out.what = "torch_fsdp: " + o.sharding_strategy + (o.sharding_strategy == "NO_SHARD" ? " (DDP)" : " (ZeRO-2)");
  }
  out.precision = resolve_precision(o.param_dtype);
  out.offload_states = o.cpu_offload;
  return out;
}

MemoryPlan hybrid_parallel_plan(Run& r) {
  const auto o = HybridParallelOptions::from_config(r.cfg, r.table);
  const std::string& t = r.table;
  BOOSTER_CHECK(o.tp_mode == "1d", at(r.cfg, t + ".tp_mode"), " the memory estimate models 1D tensor "
                "parallelism only, got tp_mode \"", o.tp_mode, "\"");
  BOOSTER_CHECK(o.pp_style != "interleaved" || o.num_model_chunks == 1, at(r.cfg, t + ".pp_style"),
                " the memory estimate models the 1F1B schedule, not the interleaved one");
  const bool ulysses = o.enable_sequence_parallelism && o.sequence_parallelism_mode == "all_to_all";
  BOOSTER_CHECK(!o.enable_sequence_parallelism || ulysses || o.sequence_parallelism_mode.empty() ||
                    o.sequence_parallelism_mode == "split_gather",
                at(r.cfg, t + ".sequence_parallelism_mode"), " the memory estimate models split_gather and "
                "all_to_all (Ulysses), not \"", o.sequence_parallelism_mode, "\"");
  BOOSTER_CHECK(!ulysses || o.tp_size == 1, at(r.cfg, t + ".sp_size"), " the memory estimate models "
                "Ulysses without tensor parallelism beside it");
  const int tp = ulysses ? o.sp_size : o.tp_size;
  BOOSTER_CHECK(r.world % (tp * o.pp_size) == 0, at(r.cfg, t + ".tp_size"), " ", r.world, " ranks do not divide "
                "into tp ", tp, " x pp_size ", o.pp_size);
  MemoryPlan out = blank(r);
  out.plan = uniform(r.layers, {tp, true, false, false, ulysses}, zero_kind(o.zero.stage), o.pp_size);
  // The embeddings and head run on the tensor-parallel group's rows (split over it: the
  // vocabulary-parallel embedding and head of the language models' policies).
  out.plan.vtp = tp;
  out.plan.vsp = ulysses;
  if (o.pp_size > 1) {
    BOOSTER_CHECK(o.num_microbatches > 0 || o.microbatch_size > 0, at(r.cfg, t + ".num_microbatches"),
                  " a pipeline needs num_microbatches or microbatch_size");
    out.plan.chunks = o.num_microbatches > 0 ? o.num_microbatches : std::max<int64_t>(1, r.batch / o.microbatch_size);
  }
  out.dp = r.world / (tp * o.pp_size);
  out.ddp_buckets = o.zero.stage == 0;
  out.zero1 = o.zero.stage == 1;
  out.megatron_sp = o.enable_sequence_parallelism && !ulysses;
  out.precision = resolve_precision(o.zero.precision);
  out.offload_states = o.zero.cpu_offload;
  if (r.checkpoint_ratio > 0 && o.gradient_checkpointing_ratio > 0) r.checkpoint_ratio = o.gradient_checkpointing_ratio;
  out.what = "hybrid_parallel: tp " + std::to_string(o.tp_size) + (ulysses ? ", Ulysses sp " + std::to_string(tp) : "") +
             ", pp " + std::to_string(o.pp_size) + ", dp " + std::to_string(out.dp) + " (zero_stage " +
             std::to_string(o.zero.stage) + ")";
  return out;
}

MemoryPlan galvatron_plan(Run& r) {
  const auto o = GalvatronOptions::from_config(r.cfg, r.table);
  MemoryPlan out = blank(r);
  out.plan = o.plan(r.layers);
  out.dp = r.world / (out.plan.pp_deg * out.plan.vtp);
  out.precision = resolve_precision(o.mixed_precision);
  out.megatron_sp = o.sequence_parallel;
  out.what = "galvatron: " + out.plan.summary(r.world);
  r.checkpoint_ratio = 0;  // the plan says which layers are checkpointed
  return out;
}

}  // namespace

MemoryPlan memory_plan(const Config& cfg, const std::string& table, const nn::Module& model, int world, int64_t batch,
                       double checkpoint_ratio, const std::string& booster_precision) {
  BOOSTER_CHECK(world >= 1, "memory_plan: the world must have a rank, got ", world);
  BOOSTER_CHECK(batch >= 1, "memory_plan: the batch must have a row, got ", batch);
  const auto* pm = dynamic_cast<const nn::PipelineModule*>(&model);
  BOOSTER_CHECK(pm != nullptr, "memory_plan: the ", model.type_name(), " has no transformer layers the cost model "
                "knows (it is not an nn::PipelineModule)");
  Run r{cfg, table, model, pm->num_pipeline_layers(), world, batch, checkpoint_ratio};
  const std::string name = cfg.has(table + ".name") ? cfg.get_string(table + ".name") : "";
  MemoryPlan out;
  if (name.empty() || name == "torch_ddp") out = ddp_plan(r, name, booster_precision);
  else if (name == "low_level_zero") out = low_level_zero_plan(r);
  else if (name == "gemini") out = gemini_plan(r);
  else if (name == "torch_fsdp") out = torch_fsdp_plan(r);
  else if (name == "hybrid_parallel") out = hybrid_parallel_plan(r);
  else if (name == "galvatron") out = galvatron_plan(r);
  else
    BOOSTER_THROW(ValueError, at(cfg, table + ".name"), " the memory estimate knows the plugins torch_ddp, "
                  "low_level_zero, gemini, torch_fsdp, hybrid_parallel and galvatron, not '", name, "'");
  checkpoint_first(out.plan, r.checkpoint_ratio);
  if (out.plan.global_bsz == 0) out.plan.global_bsz = batch * out.dp;
  out.plan.world_size = world;
  BOOSTER_CHECK(out.plan.global_bsz % out.dp == 0, "memory_plan: the plan's global batch ", out.plan.global_bsz,
                " does not divide over ", out.dp, " data-parallel replicas");
  out.plan.validate(world, r.layers);
  return out;
}

}  // namespace booster::plugins
