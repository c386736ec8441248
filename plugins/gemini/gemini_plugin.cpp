// GeminiPlugin (see gemini_plugin.h).
#include "plugins/gemini/gemini_plugin.h"

#include <cmath>
#include <map>

#include <spdlog/spdlog.h>

#include "booster/auto_precision.h"
#include "core/dist/runtime.h"
#include "zero/model.h"
#include "booster/plugin_options.h"

namespace booster::plugins {

namespace {

/// Gemini's model wrapper (Colossal-AI's GeminiDDP): the ZeRO model under it, and the
/// engine's fetch hooks on the module.
class GeminiDDP : public ModelWrapper {
 public:
  using ModelWrapper::ModelWrapper;
  std::string type_name() const override { return "GeminiDDP"; }
};

}  // namespace

int64_t search_chunk_size(const std::vector<int64_t>& numels, int64_t min_chunk_size, int64_t search_range,
                          int64_t step) {
  BOOSTER_CHECK(!numels.empty(), "GeminiPlugin: the model has no trainable parameters");
  const int64_t largest = *std::max_element(numels.begin(), numels.end());
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  const int64_t start = std::max(largest, std::min(min_chunk_size, total));
  int64_t best = start, best_waste = -1;
  for (int64_t size = start; size <= start + search_range; size += std::max<int64_t>(step, 1)) {
    int64_t waste = 0, used = 0;
    for (int64_t n : numels) {
      if (used > 0 && used + n > size) waste += size - used, used = 0;
      used += n;
    }
    waste += size - used;
    if (best_waste < 0 || waste < best_waste) best = size, best_waste = waste;
  }
  return best;
}

GeminiOptions GeminiOptions::from_config(const Config& cfg, const std::string& t) {
  using O = GeminiOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("chunk_config_dict.chunk_size", &O::chunk_size, "elements per chunk (0: searched from the *_m keys)")
        .add("chunk_config_dict.keep_gathered", &O::keep_gathered, "chunks stay whole (not sharded)")
        .add("placement_policy", &O::placement_policy, "static (by the fractions) or auto (under memory_cap_mb)")
        .add("enable_gradient_accumulation", &O::enable_gradient_accumulation)
        .add("max_prefetch", &O::max_prefetch)
        .add("shard_param_frac", &O::shard_param_frac, "fraction of chunk memory sharded (1: ZeRO-3, 0: ZeRO-2)")
        .add("offload_optim_frac", &O::offload_optim_frac, "share of masters and optimizer states on local disk")
        .add("offload_param_frac", &O::offload_param_frac, "share of the parameters' slices on local disk (needs both other fractions 1)")
        .add("warmup_non_model_data_ratio", &O::warmup_non_model_data_ratio)
        .add("steady_cuda_cap_ratio", &O::steady_cuda_cap_ratio)
        .add("precision", &O::zero, &zero::ZeroOptions::precision, "fp16, bf16, fp32 or auto")
        .add("master_weights", &O::zero, &zero::ZeroOptions::master_weights)
        .add("pin_memory", &O::pin_memory)
        .add("force_outputs_fp32", &O::force_outputs_fp32)
        .add("strict_ddp_mode", &O::strict_ddp_mode)
        .add("search_range_m", &O::search_range_m, "millions of elements searched above the smallest chunk")
        .add("hidden_dim", &O::hidden_dim, "the search step (0: None, 1024)")
        .add("min_chunk_size_m", &O::min_chunk_size_m, "millions of elements")
        .add("gpu_margin_mem_ratio", &O::gpu_margin_mem_ratio)
        .add("max_norm", &O::zero, &zero::ZeroOptions::max_norm)
        .add("norm_type", &O::norm_type)
        .add("tp_size", &O::tp_size)
        .add("extra_dp_size", &O::extra_dp_size)
        .add("enable_async_reduce", &O::enable_async_reduce)
        .add("verbose", &O::verbose)
        .add("offload_dir", &O::zero, &zero::ZeroOptions::offload_dir, "folder of the disk tier (\"\": default_offload_dir(), the run's)")
        .add("memory_cap_mb", &O::memory_cap_mb, "auto: RAM cap per rank (0: BOOSTER_MEMORY_CAP_MB, else RAM / local ranks)");
    return bind_loss_scale<O>(b, [](O& o) -> GradScalerOptions& { return o.zero.scaler; });
  }();
  return options_from(cfg, t, "gemini", binder);
}

void GeminiOptions::validate() const {
  const char* who = "GeminiPlugin: ";
  BOOSTER_CHECK(placement_policy == "static" || placement_policy == "auto", who,
                "placement_policy must be static or auto, got '", placement_policy, "'");
  BOOSTER_CHECK(chunk_size >= 0, who, "chunk_config_dict.chunk_size must be >= 0, got ", chunk_size);
  BOOSTER_CHECK(!keep_gathered || offload_param_frac == 0, who, "chunk_config_dict.keep_gathered keeps every chunk "
                "whole: offload_param_frac (this rank's slices on disk) needs them sharded; set it to 0");
  BOOSTER_CHECK(!keep_gathered || placement_policy == "static", who, "chunk_config_dict.keep_gathered keeps every "
                "chunk whole, which placement_policy auto cannot move to disk; use static");
  BOOSTER_CHECK(memory_cap_mb >= 0, who, "memory_cap_mb must be >= 0, got ", memory_cap_mb);
  BOOSTER_CHECK(placement_policy == "auto" || memory_cap_mb == 0, who, "memory_cap_mb applies to placement_policy "
                "auto only (static placement follows the fractions)");
  zero.validate_common(who);
  auto frac = [&](double v, const char* name) {
    BOOSTER_CHECK(v >= 0 && v <= 1, who, name, " must be in [0, 1], got ", v);
  };
  frac(shard_param_frac, "shard_param_frac");
  frac(offload_optim_frac, "offload_optim_frac");
  frac(offload_param_frac, "offload_param_frac");
  frac(warmup_non_model_data_ratio, "warmup_non_model_data_ratio");
  frac(steady_cuda_cap_ratio, "steady_cuda_cap_ratio");
  BOOSTER_CHECK(offload_param_frac == 0 || (shard_param_frac == 1 && offload_optim_frac == 1), who,
                "offload_param_frac ", offload_param_frac, " takes effect only with shard_param_frac = 1 and "
                "offload_optim_frac = 1 (Colossal-AI ignores it otherwise; set them, or offload_param_frac = 0)");
  BOOSTER_CHECK(zero.master_weights, who, "master_weights = false is not implemented yet");
  BOOSTER_CHECK(tp_size == 1 && extra_dp_size == 1, who, "tp_size and extra_dp_size other than 1 are not implemented yet");
  BOOSTER_CHECK(norm_type == 2.0, who, "norm_type must be 2.0 (Colossal-AI clips by the L2 norm only), got ", norm_type);
  BOOSTER_CHECK(zero.max_norm >= 0, who, "max_norm must be >= 0, got ", zero.max_norm);
  BOOSTER_CHECK(search_range_m >= 0 && min_chunk_size_m >= 0 && hidden_dim >= 0 && max_prefetch >= 0, who,
                "search_range_m, min_chunk_size_m, hidden_dim and max_prefetch must be >= 0");
}

zero::ZeroOptions GeminiOptions::zero_defaults() {
  zero::ZeroOptions z;
  z.stage = 2;
  z.scaler.initial_scale = 65536.0;  // 2**16, as Colossal-AI's GeminiPlugin
  return z;
}

GeminiPlugin::GeminiPlugin(GeminiOptions opts) : opts_(std::move(opts)) {
  // "auto": what this CPU runs faster, measured once a process (booster/auto_precision.h).
  opts_.zero.precision = resolve_precision(opts_.zero.precision);
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(), "GeminiPlugin: call dist::launch_from_openmpi() before creating the plugin");
}

int64_t gemini_chunk_elems(const GeminiOptions& opts, const std::vector<int64_t>& numels) {
  BOOSTER_CHECK(!numels.empty(), "GeminiPlugin: no parameters to pack into chunks");
  const double M = double(1 << 20);
  // chunk_config_dict gives the size (at least the largest parameter: a parameter is never split between chunks).
  return opts.chunk_size > 0 ? std::max(opts.chunk_size, *std::max_element(numels.begin(), numels.end()))
                             : search_chunk_size(numels, int64_t(opts.min_chunk_size_m * M), int64_t(opts.search_range_m * M),
                                                 opts.hidden_dim > 0 ? opts.hidden_dim : 1024);
}

void GeminiPlugin::configure(BoostedObjects& o) {
  BOOSTER_CHECK(o.optimizer != nullptr, "GeminiPlugin: boost the model with its optimizer (Gemini shards the "
                "parameters between the optimizer's ranks)");
  std::vector<int64_t> numels;
  for (auto& g : o.optimizer->param_groups())
    for (auto& [n, p] : g.params)
      if (p.requires_grad()) numels.push_back(p.numel());
  std::reverse(numels.begin(), numels.end());  // packed from the last parameters (backward's order) until the first step
  const double M = double(1 << 20);
  auto chunk_elems = [opts = opts_](const std::vector<int64_t>& sizes) { return gemini_chunk_elems(opts, sizes); };
  const int64_t chunk = chunk_elems(numels);
  zero::ZeroOptions z = opts_.zero;  // stage 2, its buckets the chunks
  z.stage = 2;
  z.reduce_bucket_size_in_m = double(chunk) / M;
  z.overlap_communication = opts_.enable_async_reduce;
  // auto: every chunk sharded, with a place on disk for all its states (placement pins some in RAM).
  const bool automatic = opts_.placement_policy == "auto";
  const double shard_frac = opts_.keep_gathered ? 0.0 : automatic ? 1.0 : opts_.shard_param_frac;
  const double optim_frac = automatic ? 1.0 : opts_.offload_optim_frac;
  const double param_frac = automatic ? 1.0 : opts_.offload_param_frac;
  z.cpu_offload = optim_frac > 0;
  z.offload_frac = optim_frac;
  // Under the cap from the start: what boost frees on the way (the fp32 parameters, the
  // whole chunks it shards) is given back, not cached. AutoPlacement lifts the limit when it goes.
  const size_t cap = automatic ? resolve_memory_cap(opts_.memory_cap_mb) : 0;
  if (automatic) limit_host_footprint(cap);
  std::shared_ptr<zero::Engine> engine;
  try {
    engine = zero::apply_zero(o, dist::ProcessGroup::world(), z);
  } catch (...) {
    host_tier().set_footprint_limit(0);
    throw;
  }
  const zero::Layout& layout = engine->layout();
  zero::Gatherer& gatherer = engine->gatherer();
  // Static placement: shard_param_frac of the chunk memory is sharded, and of that,
  // offload_param_frac keeps its slices on the disk tier too, first chunks first.
  int64_t total = 0;
  for (auto& p : layout.parts()) total += p.numel;
  auto first_share = [&](double frac, auto&& apply) {
    int64_t done = 0;
    for (size_t b = 0; b < layout.buckets().size() && double(done) < frac * double(total) - 0.5; ++b) {
      apply(b);
      for (size_t i : layout.buckets()[b]) done += layout.parts()[i].numel;
    }
  };
  first_share(shard_frac, [&](size_t b) { gatherer.shard_bucket(b); });
  first_share(param_frac, [&](size_t b) { gatherer.offload_bucket(b); });
  placement_.reset();
  if (automatic) {
    try {
      placement_ = std::make_shared<AutoPlacement>(*engine, *o.optimizer->find<zero::LowLevelZeroOptimizer>(), cap,
                                                   opts_.warmup_non_model_data_ratio, opts_.steady_cuda_cap_ratio);
    } catch (...) {
      host_tier().set_footprint_limit(0);  // a cap refused at boost leaves no limit behind
      throw;
    }
    engine->set_placement(placement_);
  }
  // Chunk by chunk: a chunk's reduce-scatter buffers go before the third is launched.
  engine->grads().set_max_inflight(2);
  // After every step, the first one's repacking, then the placement of the chunks.
  engine->install_fetch_hooks(*o.model->module(), opts_.max_prefetch, chunk_elems);
  o.model = std::make_shared<GeminiDDP>(o.model);
}

std::shared_ptr<CheckpointIO> GeminiPlugin::get_checkpoint_io() { return checkpoint_io_.get(name(), dist::world_size(), 1, 1, opts_.zero.precision); }

NoSyncScope GeminiPlugin::no_sync(ModelWrapper& model, OptimizerWrapper*) {
  BOOSTER_CHECK(opts_.enable_gradient_accumulation, "GeminiPlugin.no_sync: set enable_gradient_accumulation = true "
                "to accumulate gradients over micro-batches");
  return Plugin::no_sync(model, nullptr);
}

}  // namespace booster::plugins
