// GeminiPlugin (see gemini_plugin.h).
#include "plugins/gemini/gemini_plugin.h"

#include <cmath>
#include <map>

#include <spdlog/spdlog.h>

#include "booster/checkpoint/general_checkpoint_io.h"
#include "core/dist/runtime.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "booster/plugin_options.h"

namespace booster::plugins {

namespace {

/// Gemini's model wrapper (Colossal-AI's GeminiDDP): module hooks that fetch a chunk before
/// a module using it runs forward or backward and release it after. The first forward
/// records the order in which the modules use the parameters; after the first step the
/// chunks are packed again in that order (Colossal-AI packs them in that order only with
/// memory statistics made before the model is wrapped, else in registration order).
class GeminiDDP : public ModelWrapper {
 public:
  /// chunk_elems: the chunk size for parameters of these sizes in this (backward) order.
  GeminiDDP(std::shared_ptr<ModelWrapper> inner, ZeroPartition& zp, ZeroGrads& grads, int max_prefetch,
            std::function<int64_t(const std::vector<int64_t>&)> chunk_elems)
      : ModelWrapper(std::move(inner)), zp_(zp), grads_(grads), max_prefetch_(max_prefetch),
        chunk_elems_(std::move(chunk_elems)), used_(zp.parts().size(), false) {
    install_hooks();
    // In backward, a chunk goes once its gradients are reduce-scattered.
    grads.set_after_launch([this](size_t b) { zp_.release(b); });
  }
  std::string type_name() const override { return "GeminiDDP"; }

  /// After every optimizer step: the first one packs the chunks in the recorded order.
  void after_step() {
    if (repacked_ || first_use_.empty()) return;
    repacked_ = true;
    repack();
  }
  /// Parts in the order the first forward used them (empty before it).
  const std::vector<size_t>& first_use() const { return first_use_; }

 private:
  struct Trace {
    std::vector<size_t> order;          // chunks in the order a forward (backward) first used them
    std::map<size_t, size_t> position;  // chunk -> its index in order
    bool recorded = false;
  };

  void install_hooks() {
    hooks_.clear();
    fwd_ = bwd_ = Trace{};
    std::map<std::string, size_t> part_of;
    for (size_t i = 0; i < zp_.parts().size(); ++i) part_of[zp_.parts()[i].name] = i;
    done_.assign(zp_.buckets().size(), 0);
    auto root = module();
    for (auto& [path, m] : root->named_modules()) {
      std::vector<size_t> mine;  // parts of this module's own parameters
      for (auto& [n, p] : m->named_parameters(false)) {
        auto it = part_of.find(path.empty() ? n : path + "." + n);
        if (it != part_of.end()) mine.push_back(it->second);
      }
      if (mine.empty()) continue;
      std::map<size_t, int> uses;  // bucket -> this module's parameters in it
      for (size_t i : mine) ++uses[zp_.bucket_of(i)];
      hooks_.push_back(m->register_forward_pre_hook([this, uses, mine](nn::Module&) {
        if (recording_)
          for (size_t i : mine)
            if (!used_[i]) used_[i] = true, first_use_.push_back(i);
        for (auto& [b, k] : uses) use(fwd_, b);
      }));
      hooks_.push_back(m->register_forward_hook([this, uses](nn::Module&) {
        for (auto& [b, k] : uses)
          if ((done_[b] += k) >= int(zp_.buckets()[b].size())) zp_.release(b);  // every parameter of the chunk used
      }));
      hooks_.push_back(m->register_backward_pre_hook([this, uses](nn::Module&) {
        for (auto& [b, k] : uses) use(bwd_, b);
      }));
    }
    // A forward starts counting anew; the first forward and backward record the order in
    // which chunks are used, for prefetching the next ones.
    hooks_.push_back(root->register_forward_pre_hook([this](nn::Module&) {
      std::fill(done_.begin(), done_.end(), 0);
      recording_ = first_use_.empty();
      if (!fwd_.order.empty()) fwd_.recorded = true;
      if (!bwd_.order.empty()) bwd_.recorded = true;
    }));
    hooks_.push_back(root->register_forward_hook([this](nn::Module&) { recording_ = false; }));
  }

  // Packs the chunks again, the parameters in the order the first forward used them (those
  // it did not use first, so that backward's first chunks are complete early), and the
  // hooks and the reduction follow (the placement places the new chunks after).
  void repack() {
    const size_t n = zp_.parts().size();
    std::vector<size_t> forward;
    for (size_t i = 0; i < n; ++i)
      if (!used_[i]) forward.push_back(i);
    forward.insert(forward.end(), first_use_.begin(), first_use_.end());
    // Every rank must pack alike (the chunks are collectives): rank 0's order decides.
    if (zp_.group().size() > 1) {
      Tensor order = Tensor::empty({int64_t(n)}, DType::i64);
      for (size_t k = 0; k < n; ++k) order.data<int64_t>()[k] = int64_t(forward[k]);
      dist::broadcast(order, zp_.group().ranks()[0], zp_.group());
      for (size_t k = 0; k < n; ++k) forward[k] = size_t(order.data<int64_t>()[k]);
    }
    std::vector<size_t> backward(forward.rbegin(), forward.rend());
    std::vector<int64_t> numels;
    for (size_t i : backward) numels.push_back(zp_.parts()[i].numel);
    auto buckets = zp_.pack_buckets(backward, double(chunk_elems_(numels)));
    if (buckets == zp_.buckets()) return;
    zp_.rebucket(std::move(buckets));
    grads_.rebucket();
    install_hooks();
    if (dist::world_rank() == 0)
      spdlog::info("GeminiPlugin: {} chunks packed again in the order the first forward used the parameters",
                   zp_.buckets().size());
  }

  // Fetches chunk b and starts fetching the next max_prefetch chunks of the recorded order.
  void use(Trace& t, size_t b) {
    if (!t.recorded && !t.position.count(b)) {
      t.position[b] = t.order.size();
      t.order.push_back(b);
    }
    zp_.fetch(b);
    if (!t.recorded) return;
    auto it = t.position.find(b);
    if (it == t.position.end()) return;
    if (it->second + 1 < t.order.size() && !zp_.is_fetched(t.order[it->second + 1]))
      zp_.prefetch_own_bucket(t.order[it->second + 1]);  // its slices on disk are read ahead
    for (size_t j = it->second + 1; j < t.order.size() && j <= it->second + size_t(max_prefetch_); ++j)
      zp_.prefetch(t.order[j]);
  }

  ZeroPartition& zp_;
  ZeroGrads& grads_;
  int max_prefetch_;
  std::function<int64_t(const std::vector<int64_t>&)> chunk_elems_;
  Trace fwd_, bwd_;
  std::vector<int> done_;     // per chunk: its parameters this forward has used
  std::vector<bool> used_;    // per part: the first forward used it
  std::vector<size_t> first_use_;
  bool recording_ = false, repacked_ = false;
  std::vector<HookHandle> hooks_;
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
        .add("precision", &O::precision, "fp16, bf16 or fp32")
        .add("master_weights", &O::master_weights)
        .add("pin_memory", &O::pin_memory)
        .add("force_outputs_fp32", &O::force_outputs_fp32)
        .add("strict_ddp_mode", &O::strict_ddp_mode)
        .add("search_range_m", &O::search_range_m, "millions of elements searched above the smallest chunk")
        .add("hidden_dim", &O::hidden_dim, "the search step (0: None, 1024)")
        .add("min_chunk_size_m", &O::min_chunk_size_m, "millions of elements")
        .add("gpu_margin_mem_ratio", &O::gpu_margin_mem_ratio)
        .add("max_norm", &O::max_norm)
        .add("norm_type", &O::norm_type)
        .add("tp_size", &O::tp_size)
        .add("extra_dp_size", &O::extra_dp_size)
        .add("enable_async_reduce", &O::enable_async_reduce)
        .add("verbose", &O::verbose)
        .add("offload_dir", &O::offload_dir, "folder of the disk tier (\"\": default_offload_dir(), the run's)")
        .add("memory_cap_mb", &O::memory_cap_mb, "auto: RAM cap per rank (0: BOOSTER_MEMORY_CAP_MB, else RAM / local ranks)");
    return bind_loss_scale(b, &O::scaler);
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
  BOOSTER_CHECK(precision == "fp16" || precision == "bf16" || precision == "fp32", who,
                "precision must be one of fp16, bf16, fp32, got '", precision, "'");
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
  BOOSTER_CHECK(master_weights, who, "master_weights = false is not implemented yet");
  BOOSTER_CHECK(tp_size == 1 && extra_dp_size == 1, who, "tp_size and extra_dp_size other than 1 are not implemented yet");
  BOOSTER_CHECK(norm_type == 2.0, who, "norm_type must be 2.0 (Colossal-AI clips by the L2 norm only), got ", norm_type);
  BOOSTER_CHECK(max_norm >= 0, who, "max_norm must be >= 0, got ", max_norm);
  BOOSTER_CHECK(search_range_m >= 0 && min_chunk_size_m >= 0 && hidden_dim >= 0 && max_prefetch >= 0, who,
                "search_range_m, min_chunk_size_m, hidden_dim and max_prefetch must be >= 0");
  scaler.validate(who);
}

GeminiPlugin::GeminiPlugin(GeminiOptions opts) : opts_(std::move(opts)) {
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(), "GeminiPlugin: call dist::launch_from_openmpi() before creating the plugin");
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
  // chunk_config_dict gives the size (at least the largest parameter: a parameter is never split between chunks).
  auto chunk_elems = [opts = opts_, M](const std::vector<int64_t>& sizes) {
    return opts.chunk_size > 0 ? std::max(opts.chunk_size, *std::max_element(sizes.begin(), sizes.end()))
                               : search_chunk_size(sizes, int64_t(opts.min_chunk_size_m * M), int64_t(opts.search_range_m * M),
                                                   opts.hidden_dim > 0 ? opts.hidden_dim : 1024);
  };
  const int64_t chunk = chunk_elems(numels);
  LowLevelZeroOptions z;
  z.stage = 2;
  z.precision = opts_.precision;
  z.scaler = opts_.scaler;
  z.max_norm = opts_.max_norm;
  z.reduce_bucket_size_in_m = double(chunk) / M;
  z.overlap_communication = opts_.enable_async_reduce;
  // auto: every chunk sharded, with a place on disk for all its states (placement pins some in RAM).
  const bool automatic = opts_.placement_policy == "auto";
  const double shard_frac = opts_.keep_gathered ? 0.0 : automatic ? 1.0 : opts_.shard_param_frac;
  const double optim_frac = automatic ? 1.0 : opts_.offload_optim_frac;
  const double param_frac = automatic ? 1.0 : opts_.offload_param_frac;
  z.cpu_offload = optim_frac > 0;
  z.offload_frac = optim_frac;
  z.offload_dir = opts_.offload_dir;
  z.master_weights = opts_.master_weights;
  // Under the cap from the start: what boost frees on the way (the fp32 parameters, the
  // whole chunks it shards) is given back, not cached. AutoPlacement lifts the limit when it goes.
  const size_t cap = automatic ? resolve_memory_cap(opts_.memory_cap_mb) : 0;
  if (automatic) limit_host_footprint(cap);
  try {
    apply_low_level_zero(o, dist::ProcessGroup::world(), z);
  } catch (...) {
    host_tier().set_footprint_limit(0);
    throw;
  }
  auto* zm = o.model->find<LowLevelZeroModel>();
  ZeroPartition& zp = *zm->partition();
  // Static placement: shard_param_frac of the chunk memory is sharded, and of that,
  // offload_param_frac keeps its slices on the disk tier too, first chunks first.
  int64_t total = 0;
  for (auto& p : zp.parts()) total += p.numel;
  auto first_share = [&](double frac, auto&& apply) {
    int64_t done = 0;
    for (size_t b = 0; b < zp.buckets().size() && double(done) < frac * double(total) - 0.5; ++b) {
      apply(b);
      for (size_t i : zp.buckets()[b]) done += zp.parts()[i].numel;
    }
  };
  first_share(shard_frac, [&](size_t b) { zp.shard_bucket(b); });
  first_share(param_frac, [&](size_t b) { zp.offload_own(b); });
  placement_.reset();
  auto* zo = o.optimizer->find<LowLevelZeroOptimizer>();
  if (automatic)
    placement_ = std::make_shared<AutoPlacement>(zp, *zm->grads(), *zo, cap, opts_.warmup_non_model_data_ratio,
                                                 opts_.steady_cuda_cap_ratio);
  // Chunk by chunk: a chunk's reduce-scatter buffers go before the third is launched.
  zm->grads()->set_max_inflight(2);
  auto ddp = std::make_shared<GeminiDDP>(o.model, zp, *zm->grads(), opts_.max_prefetch, chunk_elems);
  zo->set_after_step([p = placement_.get(), d = std::weak_ptr<GeminiDDP>(ddp)] {
    if (auto m = d.lock()) m->after_step();  // the first step's repacking, then the placement of the chunks
    if (p) p->after_step();
  });
  o.model = ddp;
}

std::shared_ptr<CheckpointIO> GeminiPlugin::get_checkpoint_io() {
  if (!checkpoint_io_)
    checkpoint_io_ = std::make_shared<GeneralCheckpointIO>(
        checkpoint_layout(name(), dist::world_size(), dist::world_size(), 1, 1, opts_.precision));
  return checkpoint_io_;
}

NoSyncScope GeminiPlugin::no_sync(ModelWrapper& model, OptimizerWrapper*) {
  BOOSTER_CHECK(opts_.enable_gradient_accumulation, "GeminiPlugin.no_sync: set enable_gradient_accumulation = true "
                "to accumulate gradients over micro-batches");
  return Plugin::no_sync(model, nullptr);
}

}  // namespace booster::plugins
