// TorchFSDPPlugin (see torch_fsdp_plugin.h).
#include "plugins/torch_fsdp/torch_fsdp_plugin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "booster/mixed_precision.h"
#include "booster/plugin_options.h"
#include "core/dist/runtime.h"
#include "ddp/reducer.h"
#include "nn/pipeline.h"
#include "zero/model.h"

namespace booster::plugins {

namespace {

/// PyTorch's FullyShardedDataParallel around the ZeRO model (FULL_SHARD, SHARD_GRAD_OP), or
/// owning the stage-0 reducer itself (NO_SHARD).
class FullyShardedDataParallel : public ModelWrapper {
 public:
  using ModelWrapper::ModelWrapper;
  FullyShardedDataParallel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<ddp::Reducer> reducer)
      : ModelWrapper(std::move(inner)), reducer_(std::move(reducer)) {}
  std::string type_name() const override { return "FullyShardedDataParallel"; }
  GradSync* grad_sync() const override { return reducer_ ? reducer_.get() : ModelWrapper::grad_sync(); }

 private:
  std::shared_ptr<ddp::Reducer> reducer_;
};

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Parameters of module m and its children.
int64_t subtree_params(const nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

}  // namespace

TorchFSDPOptions TorchFSDPOptions::from_config(const Config& cfg, const std::string& t) {
  using O = TorchFSDPOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("sharding_strategy", &O::sharding_strategy, "FULL_SHARD, SHARD_GRAD_OP or NO_SHARD")
        .add("cpu_offload", &O::cpu_offload, "parameters, gradients, masters and optimizer states on local disk")
        .add("offload_dir", &O::offload_dir, "folder of the disk tier (\"\": default_offload_dir(), the run's)")
        .add("auto_wrap_policy", &O::auto_wrap_policy, "\"\" (None), transformer or size_based")
        .add("transformer_layer_cls", &O::transformer_layer_cls,
             "transformer: unit module classes, comma-separated (default: the model's pipeline layer types)")
        .add("min_num_params", &O::min_num_params, "size_based: parameters of a unit at least")
        .add("backward_prefetch", &O::backward_prefetch, "BACKWARD_PRE, BACKWARD_POST or \"\" (None)")
        .add("forward_prefetch", &O::forward_prefetch)
        .add("sync_module_states", &O::sync_module_states)
        .add("limit_all_gathers", &O::limit_all_gathers)
        .add("use_orig_params", &O::use_orig_params)
        .add("mixed_precision.param_dtype", &O::param_dtype, "fp32, bf16 or fp16")
        .add("mixed_precision.reduce_dtype", &O::reduce_dtype, "\"\" (param_dtype), fp32, bf16 or fp16")
        .add("mixed_precision.buffer_dtype", &O::buffer_dtype, "\"\" or fp32");
    return bind_loss_scale(b, &O::scaler);
  }();
  return options_from(cfg, t, "torch_fsdp", binder);
}

void TorchFSDPOptions::validate() const {
  const char* who = "TorchFSDPPlugin: ";
  const std::set<std::string> strategies{"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
  BOOSTER_CHECK(strategies.count(sharding_strategy), who, "sharding_strategy must be FULL_SHARD, SHARD_GRAD_OP or "
                "NO_SHARD, got '", sharding_strategy, "' (HYBRID_SHARD is not implemented)");
  BOOSTER_CHECK(auto_wrap_policy.empty() || auto_wrap_policy == "transformer" || auto_wrap_policy == "size_based", who,
                "auto_wrap_policy must be \"\" (None), transformer or size_based, got '", auto_wrap_policy, "'");
  BOOSTER_CHECK(min_num_params > 0, who, "min_num_params must be positive, got ", min_num_params);
  BOOSTER_CHECK(backward_prefetch.empty() || backward_prefetch == "BACKWARD_PRE" || backward_prefetch == "BACKWARD_POST",
                who, "backward_prefetch must be BACKWARD_PRE, BACKWARD_POST or \"\" (None), got '", backward_prefetch, "'");
  auto dtype_ok = [](const std::string& d) { return d == "fp32" || d == "bf16" || d == "fp16"; };
  BOOSTER_CHECK(dtype_ok(param_dtype), who, "mixed_precision.param_dtype must be fp32, bf16 or fp16, got '",
                param_dtype, "'");
  BOOSTER_CHECK(reduce_dtype.empty() || dtype_ok(reduce_dtype), who,
                "mixed_precision.reduce_dtype must be empty, fp32, bf16 or fp16, got '", reduce_dtype, "'");
  BOOSTER_CHECK(buffer_dtype.empty() || buffer_dtype == "fp32", who, "mixed_precision.buffer_dtype must be empty or "
                "fp32 (buffers stay fp32 here), got '", buffer_dtype, "'");
  BOOSTER_CHECK(sharding_strategy != "NO_SHARD" || reduce_dtype.empty() || reduce_dtype == param_dtype, who,
                "NO_SHARD reduces gradients in param_dtype (DDP's buckets hold the parameters' dtype); leave "
                "mixed_precision.reduce_dtype empty or equal to param_dtype");
  BOOSTER_CHECK(sharding_strategy != "NO_SHARD" || !cpu_offload, who, "cpu_offload shards to the disk tier; "
                "NO_SHARD keeps everything in RAM: use FULL_SHARD or SHARD_GRAD_OP with cpu_offload");
  scaler.validate(who);
}

zero::ZeroOptions TorchFSDPOptions::zero_options() const {
  zero::ZeroOptions z;
  z.stage = 2;  // gradients sharded in both strategies; FULL_SHARD also shards the parameters
  z.precision = param_dtype;
  z.communication_dtype = reduce_dtype;
  z.scaler = scaler;
  z.cpu_offload = cpu_offload;
  z.offload_dir = offload_dir;
  z.offload_frac = 1.0;
  return z;
}

namespace {

// transformer_layer_cls, or where it is empty the types of the model's pipeline layers.
std::vector<std::string> unit_classes(const nn::Module& root, const TorchFSDPOptions& opts) {
  auto classes = split_names(opts.transformer_layer_cls);
  if (!classes.empty() || opts.auto_wrap_policy != "transformer") return classes;
  const auto* pm = dynamic_cast<const nn::PipelineModule*>(&root);
  BOOSTER_CHECK(pm, "TorchFSDPPlugin: auto_wrap_policy transformer needs transformer_layer_cls (module classes, e.g. ",
                "\"GPT2Block\") for a ", root.type_name(), ", which is not a PipelineModule whose layers name it");
  for (auto& path : pm->stage_modules({0, pm->num_pipeline_layers(), false, false})) {
    const std::string t = root.get(path)->type_name();
    if (std::find(classes.begin(), classes.end(), t) == classes.end()) classes.push_back(t);
  }
  return classes;
}

}  // namespace

std::vector<std::string> fsdp_units(const nn::Module& root, const TorchFSDPOptions& opts) {
  std::vector<std::string> units{""};
  if (opts.auto_wrap_policy.empty()) return units;
  const auto classes = unit_classes(root, opts);
  std::set<std::string> wrapped;  // a unit's subtree is not split again by size
  for (auto& [path, m] : root.named_modules()) {
    if (path.empty()) continue;
    bool inside = false;
    for (auto& w : wrapped) inside = inside || path.rfind(w + ".", 0) == 0;
    if (inside) continue;
    const bool take = opts.auto_wrap_policy == "transformer"
                          ? std::find(classes.begin(), classes.end(), m->type_name()) != classes.end()
                          : subtree_params(*m) >= opts.min_num_params;
    if (take) units.push_back(path), wrapped.insert(path);
  }
  if (opts.auto_wrap_policy == "transformer") {  // a class in a config file is a typo more often than not
    std::set<std::string> types;
    for (auto& [path, m] : root.named_modules()) types.insert(m->type_name());
    for (auto& c : classes) {
      if (types.count(c)) continue;
      std::string have;
      for (auto& t : types) have += (have.empty() ? "" : ", ") + t;
      BOOSTER_THROW(ValueError, "TorchFSDPPlugin: transformer_layer_cls '", c, "' matches no module of the ",
                    root.type_name(), "; its module types are: ", have);
    }
  }
  return units;
}

std::vector<int64_t> fsdp_unit_params(const nn::Module& root, const std::vector<std::string>& units) {
  std::vector<int64_t> n(units.size(), 0);
  for (auto& [name, p] : root.named_parameters()) {
    size_t best = 0;  // the innermost unit above the parameter
    for (size_t u = 1; u < units.size(); ++u)
      if (name.rfind(units[u] + ".", 0) == 0 && units[u].size() > units[best].size()) best = u;
    n[best] += p.numel();
  }
  return n;
}

std::string describe_fsdp_units(const std::vector<std::string>& units, const std::vector<int64_t>& params,
                                const TorchFSDPOptions& opts) {
  const auto [lo, hi] = std::minmax_element(params.begin(), params.end());
  auto where = [&](auto it) { return units[size_t(it - params.begin())].empty() ? std::string("the root")
                                                                                  : "'" + units[size_t(it - params.begin())] + "'"; };
  std::ostringstream s;
  s << "TorchFSDPPlugin: " << units.size() << " unit(s) (auto_wrap_policy '" << opts.auto_wrap_policy << "'): largest "
    << *hi << " parameters (" << where(hi) << "), smallest " << *lo << " (" << where(lo) << ")";
  if (opts.auto_wrap_policy == "size_based" && units.size() == 1)
    s << "; size_based with min_num_params " << opts.min_num_params << " wraps no module below the root: every step "
      << "gathers the whole model as one flat parameter (lower min_num_params to cut it into units)";
  return s.str();
}

TorchFSDPPlugin::TorchFSDPPlugin(TorchFSDPOptions opts) : opts_(std::move(opts)) {
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "TorchFSDPPlugin: call dist::launch_from_openmpi() before creating the plugin");
}

void TorchFSDPPlugin::configure(BoostedObjects& o) {
  BOOSTER_CHECK(o.optimizer != nullptr, "TorchFSDPPlugin: boost the model with its optimizer (FSDP shards the "
                "parameters between the optimizer's ranks)");
  if (opts_.sharding_strategy == "NO_SHARD") configure_no_shard(o);
  else configure_sharded(o);
}

void TorchFSDPPlugin::configure_no_shard(BoostedObjects& o) {
  auto module = o.model->module();
  broadcast_module_state(*module, dist::ProcessGroup::world());
  if (opts_.param_dtype != "fp32") apply_mixed_precision(o, {opts_.param_dtype, opts_.scaler, true});
  auto reducer = std::make_shared<ddp::Reducer>(module->named_parameters(), dist::ProcessGroup::world(),
                                                 ddp::ReducerOptions{25, false, false, "TorchFSDPPlugin (NO_SHARD)"});
  o.model = std::make_shared<FullyShardedDataParallel>(o.model, reducer);
}

void TorchFSDPPlugin::configure_sharded(BoostedObjects& o) {
  auto module = o.model->module();
  const std::vector<std::string> units = fsdp_units(*module, opts_);
  if (dist::world_rank() == 0) {
    const std::string what = describe_fsdp_units(units, fsdp_unit_params(*module, units), opts_);
    if (opts_.auto_wrap_policy == "size_based" && units.size() == 1) spdlog::warn("{}", what);
    else spdlog::info("{}", what);
  }
  auto engine = zero::apply_zero(o, dist::ProcessGroup::world(), opts_.zero_options());
  // One bucket (a flat parameter) a unit: a parameter belongs to the innermost unit above
  // it; the units in reverse forward order, the order backward finishes them.
  const auto& parts = engine->layout().parts();
  std::vector<std::vector<size_t>> buckets(units.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    size_t best = 0;
    for (size_t u = 1; u < units.size(); ++u)
      if (parts[i].name.rfind(units[u] + ".", 0) == 0 && units[u].size() > units[best].size()) best = u;
    buckets[units.size() - 1 - best].push_back(i);
  }
  buckets.erase(std::remove_if(buckets.begin(), buckets.end(), [](auto& b) { return b.empty(); }), buckets.end());
  engine->gatherer().rebucket(buckets);
  engine->grads().rebucket();
  if (opts_.sharding_strategy == "FULL_SHARD") {
    for (size_t b = 0; b < buckets.size(); ++b) engine->gatherer().shard_bucket(b);
    if (opts_.cpu_offload)
      for (size_t b = 0; b < buckets.size(); ++b) engine->gatherer().offload_bucket(b);
    const int prefetch = opts_.backward_prefetch.empty() && !opts_.forward_prefetch ? 0 : 1;
    engine->install_fetch_hooks(*module, prefetch, nullptr);  // the units stay as they are
  }
  o.model = std::make_shared<FullyShardedDataParallel>(o.model);
}

std::shared_ptr<CheckpointIO> TorchFSDPPlugin::get_checkpoint_io() { return checkpoint_io_.get(name(), dist::world_size(), 1, 1, opts_.param_dtype); }

}  // namespace booster::plugins
