// GalvatronPlugin (see galvatron_plugin.h).
#include "plugins/galvatron/galvatron_plugin.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "booster/auto_precision.h"
#include "booster/plugin_options.h"
#include "core/dist/runtime.h"
#include "nn/parallel/dropout.h"
#include "shardformer/tensor_parallel_optimizer.h"
#include "shardformer/policy.h"
#include "zero/model.h"

namespace booster::plugins {

using galvatron::DpKind;
using galvatron::power_of_two;
using galvatron::GalvatronLayer;
using galvatron::HybridPlan;
using galvatron::TpKey;

namespace {

// The boosted model's head: holds the groups every layer refers to.
class GalvatronModel : public ModelWrapper {
 public:
  GalvatronModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<galvatron::LayerGroups> groups, int stages)
      : ModelWrapper(std::move(inner)), groups_(std::move(groups)), stages_(stages) {}
  std::string type_name() const override { return "GalvatronModel"; }
  void check_whole_forward() const override {
    BOOSTER_CHECK(stages_ == 1, "GalvatronPlugin: this rank is pipeline stage ", groups_->stage_index(), " of ", stages_,
                  " and holds only its layers; run the model with booster.execute_pipeline (training and evaluation)");
    ModelWrapper::check_whole_forward();
  }

 private:
  std::shared_ptr<galvatron::LayerGroups> groups_;
  int stages_;
};

// The layer each module path prefix belongs to ("vit.encoder.layer.3." -> 3).
struct LayerIndex {
  std::vector<std::pair<std::string, int64_t>> prefixes;
  LayerIndex(const nn::PipelineModule& pm) {
    for (int64_t l = 0; l < pm.num_pipeline_layers(); ++l)
      for (auto& path : pm.stage_modules({l, l + 1, false, false})) prefixes.emplace_back(path, l);
  }
  /// The layer of a module path or a tensor name, -1 for the embeddings and the head.
  int64_t of(const std::string& name) const {
    for (auto& [p, l] : prefixes)
      if (name == p || name.compare(0, p.size() + 1, p + ".") == 0) return l;
    return -1;
  }
};

// One bucket a layer (last first, the order backward finishes them) and one for the rest,
// so that a ZeRO-3 layer is gathered alone where it runs; the ZeRO-3 ones sharded.
void bucket_by_layer(zero::Engine& engine, nn::Module& module, int64_t layers,
                     const std::function<int64_t(const std::string&)>& layer_of,
                     const std::function<DpKind(const std::string&)>& kind_of) {
  const auto& parts = engine.layout().parts();
  std::vector<std::vector<size_t>> buckets(size_t(layers) + 1);
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t l = layer_of(parts[i].name);
    buckets[l < 0 ? size_t(layers) : size_t(layers - 1 - l)].push_back(i);
  }
  buckets.erase(std::remove_if(buckets.begin(), buckets.end(), [](auto& b) { return b.empty(); }), buckets.end());
  engine.gatherer().rebucket(buckets);
  engine.grads().rebucket();
  bool sharded = false;
  for (size_t b = 0; b < engine.layout().buckets().size(); ++b)
    if (kind_of(parts[engine.layout().buckets()[b].front()].name) == DpKind::zero3) {
      engine.gatherer().shard_bucket(b);
      sharded = true;
    }
  if (sharded) engine.install_fetch_hooks(module, 1, nullptr);
}

TpKey key_of(const galvatron::LayerStrategy& s, int stage) { return {s.tp, s.consecutive(stage), s.ulysses()}; }

// Under vsp the embeddings and the head run whole on every rank of their group, on the
// group's rows: their dropouts must drop the same elements on each (one stream a group).
void replicate_dropouts(nn::Module& module, const std::function<bool(const std::string&)>& mine,
                        const std::shared_ptr<Generator>& gen) {
  for (auto& [path, m] : module.named_modules())
    if (!path.empty() && mine(path) && dynamic_cast<nn::Dropout*>(m.get()))
      module.replace(path, nn::TPDropout::from_native_module(m, gen, false));
}

}  // namespace

GalvatronOptions GalvatronOptions::from_config(const Config& cfg, const std::string& t) {
  using O = GalvatronOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("galvatron_config_path", &O::galvatron_config_path, "a strategy JSON (\"\": the global-mode arguments)")
        .add("pp_deg", &O::pp_deg, "pipeline degree")
        .add("global_tp_deg", &O::global_tp_deg, "every layer's tensor-parallel degree")
        .add_flag("global_tp_consec", &O::global_tp_consec, "tensor-parallel groups of consecutive ranks")
        .add_flag("use_ulysses", &O::use_ulysses, "every layer Ulysses sequence parallel of degree global_tp_deg")
        .add_flag("sequence_parallel", &O::sequence_parallel, "Megatron's sequence parallelism in every tensor-parallel layer")
        .add_flag("sdp", &O::sdp, "ZeRO-3 on every layer")
        .add_flag("global_checkpoint", &O::global_checkpoint, "every layer checkpointed")
        .add("chunks", &O::chunks, "micro-batches a step (-1: micro-batches of 4 rows with pp_deg > 1)")
        .add("pipeline_type", &O::pipeline_type, "gpipe or pipedream_flush")
        .add("default_dp_type", &O::default_dp_type, "ddp, zero2 or zero3")
        .add("vocab_tp", &O::vocab_tp, "the embeddings' and head's tensor-parallel degree")
        .add_flag("vocab_sp", &O::vocab_sp, "vocab_tp a Ulysses degree: the embeddings and head whole on the group's rows")
        .add_flag("embed_sdp", &O::embed_sdp, "the embeddings and head under ZeRO-3")
        .add("global_train_batch_size", &O::global_train_batch_size, "the global batch (0: the run's)")
        .add("mixed_precision", &O::mixed_precision, "fp32, fp16, bf16 or auto")
        .add("reduce_bucket_size_in_m", &O::reduce_bucket_size_in_m, "millions of elements a gradient bucket")
        .add("custom_policy", &O::custom_policy, "a registered shardformer policy (\"\": the model's own)");
    return bind_loss_scale(b, &O::scaler);
  }();
  GalvatronOptions o = options_from(cfg, t, "galvatron", binder);
  // A relative strategy file is found beside the config file (as a run's configs ship together).
  namespace fs = std::filesystem;
  const fs::path plan(o.galvatron_config_path), config_dir = fs::path(cfg.name()).parent_path();
  if (!plan.empty() && plan.is_relative() && !fs::exists(plan) && fs::exists(config_dir / plan))
    o.galvatron_config_path = (config_dir / plan).string();
  return o;
}

void GalvatronOptions::validate() const {
  const char* who = "GalvatronPlugin: ";
  BOOSTER_CHECK(power_of_two(pp_deg), who, "pp_deg must be a power of two, got ", pp_deg);
  BOOSTER_CHECK(power_of_two(global_tp_deg), who, "global_tp_deg must be a power of two, got ", global_tp_deg);
  BOOSTER_CHECK(power_of_two(vocab_tp), who, "vocab_tp must be a power of two, got ", vocab_tp);
  BOOSTER_CHECK(chunks >= 1 || chunks == -1, who, "chunks must be >= 1 or -1, got ", chunks);
  BOOSTER_CHECK(pipeline_type == "gpipe" || pipeline_type == "pipedream_flush", who,
                "pipeline_type must be gpipe or pipedream_flush, got '", pipeline_type, "'");
  galvatron::dp_kind_from_name(default_dp_type, "[plugin] default_dp_type");
  BOOSTER_CHECK(mixed_precision == "fp32" || mixed_precision == "fp16" || mixed_precision == "bf16", who,
                "mixed_precision must be fp32, fp16 or bf16, got '", mixed_precision, "'");
  BOOSTER_CHECK(global_train_batch_size >= 0, who, "global_train_batch_size must be >= 0, got ", global_train_batch_size);
  BOOSTER_CHECK(reduce_bucket_size_in_m > 0, who, "reduce_bucket_size_in_m must be positive, got ", reduce_bucket_size_in_m);
  scaler.validate(who);
}

HybridPlan GalvatronOptions::plan(int64_t num_layers) const {
  if (!galvatron_config_path.empty()) {
    HybridPlan p = HybridPlan::from_json_file(galvatron_config_path);
    if (p.global_bsz == 0) p.global_bsz = global_train_batch_size;
    return p;
  }
  HybridPlan p;
  p.pp_deg = pp_deg;
  p.layers.assign(size_t(num_layers), {global_tp_deg, global_tp_consec, sdp, global_checkpoint, use_ulysses});
  p.global_bsz = global_train_batch_size;
  p.chunks = chunks == -1 && pp_deg == 1 ? 1 : chunks;
  p.pipeline_type = pipeline_type;
  p.default_dp_type = default_dp_type;
  p.vtp = vocab_tp;
  p.vsp = vocab_sp;
  p.embed_sdp = embed_sdp;
  return p;
}

GalvatronPlugin::GalvatronPlugin(GalvatronOptions opts) : opts_(std::move(opts)) {
  // "auto": what this CPU runs faster, measured once a process (booster/auto_precision.h).
  opts_.mixed_precision = resolve_precision(opts_.mixed_precision);
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "GalvatronPlugin: call dist::launch_from_openmpi() before creating the plugin");
  // The groups are made now, once (collective): from the file's layers, or the global
  // template (a layer a stage). Checked first, the model's layer count aside.
  plan_ = opts_.plan(opts_.pp_deg);
  const int world = dist::world_size();
  plan_.validate(world, int64_t(plan_.layers.size()));
  pp_deg_ = plan_.pp_deg;
  vtp_ = plan_.vtp;
  const int stage = world / pp_deg_;
  std::set<TpKey> keys{{vtp_, true}};
  for (auto& l : plan_.layers) keys.insert(key_of(l, stage));
  groups_ = std::make_shared<galvatron::LayerGroups>(pp_deg_, keys);
}

std::pair<int, int> GalvatronPlugin::dp_rank_size() const {
  return {groups_->local_rank() / vtp_, groups_->stage_size() / vtp_};
}

void GalvatronPlugin::shard_layers(nn::Module& module, const nn::PipelineModule& pm) {
  const int stage = groups_->stage_size();
  const LayerIndex index(pm);
  const TpKey boundary = key_of(plan_.boundary(), stage);
  bool any = boundary.tp > 1 && !boundary.sp;
  for (auto& l : plan_.layers) any = any || l.tp > 1;
  if (!any && !boundary.sp) return;
  std::shared_ptr<shardformer::Policy> policy =
      !opts_.custom_policy.empty() ? shardformer::make_policy(opts_.custom_policy) : shardformer::auto_policy(module);
  BOOSTER_CHECK(!any || policy != nullptr, "GalvatronPlugin: the plan has tensor-parallel layers, and there is no "
                "shardformer policy for a ", module.type_name(), " model; write one and pass it as custom_policy");
  const uint64_t seed = default_generator().state().seed;
  int key_index = 0;
  std::map<TpKey, shardformer::ShardConfig> configs;
  auto config = [&](TpKey k) -> const shardformer::ShardConfig& {
    auto [it, fresh] = configs.try_emplace(k);
    if (fresh) {
      // Dropout streams: one per data-parallel slice of the key (equal on its tp group), one per rank.
      const auto& tp = groups_->tp(k);
      if (k.sp) {  // Ulysses over the same ranks: whole weights, the attention exchanging heads for tokens
        it->second.sequence_parallel_process_group = &tp;
        it->second.enable_sequence_parallelism = true;
        it->second.sequence_parallelism_mode = "all_to_all";
      } else {
        it->second.tensor_parallel_process_group = &tp;
        if (opts_.sequence_parallel) {  // Megatron's: LayerNorm and dropout on token shards (the layer splits them)
          it->second.enable_sequence_parallelism = true;
          it->second.sequence_parallelism_mode = "split_gather";
        }
      }
      const uint64_t slice = uint64_t(groups_->dp(k.groups()).rank());  // which rows (a Ulysses key's too)
      it->second.replicated_generator = std::make_shared<Generator>(
          seed, (uint64_t(1) << 32) + (uint64_t(++key_index) << 20) + slice + uint64_t(groups_->stage_index()) * 4096);
      it->second.parallel_generator = std::make_shared<Generator>(seed, (uint64_t(2) << 32) + uint64_t(dist::world_rank()));
    }
    return it->second;
  };
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    const TpKey k = key_of(plan_.layers[size_t(l)], stage);
    if (k.tp == 1) continue;
    shardformer::shard_modules(module, *policy, config(k), [&](const std::string& path) { return index.of(path) == int64_t(l); });
  }
  auto outside = [&](const std::string& path) { return index.of(path) < 0; };
  if (boundary.sp) replicate_dropouts(module, outside, config(boundary).replicated_generator);
  else if (boundary.tp > 1) shardformer::shard_modules(module, *policy, config(boundary), outside);
}

void GalvatronPlugin::wrap_layers(nn::Module& module, const nn::PipelineModule& pm, const nn::StageSpec& spec) {
  const int stage = groups_->stage_size();
  const TpKey boundary{vtp_, true};  // the rows' layout (under vsp too: the group's rows, whole)
  auto key = [&](int64_t l) { return key_of(plan_.layers[size_t(l)], stage); };
  // Token-split layers (Ulysses, or tensor-parallel under Megatron-SP) hand the tokens on
  // split to the next one of the same group within the stage.
  auto split = [&](int64_t l) { return plan_.layers[size_t(l)].splits_tokens(opts_.sequence_parallel); };
  auto chained = [&](int64_t l) {
    return l > spec.layer_begin && l < spec.layer_end && split(l - 1) && split(l) && key(l - 1).groups() == key(l).groups();
  };
  std::shared_ptr<int64_t> tokens;
  for (int64_t l = spec.layer_begin; l < spec.layer_end; ++l) {
    const auto paths = pm.stage_modules({l, l + 1, false, false});
    BOOSTER_CHECK(paths.size() == 1, "GalvatronPlugin: layer ", l, " of a ", module.type_name(), " is ", paths.size(),
                  " modules; a layerwise plan needs one module a layer");
    auto inner = std::dynamic_pointer_cast<nn::UnaryModule>(module.get(paths[0]));
    BOOSTER_CHECK(inner != nullptr, "GalvatronPlugin: layer '", paths[0], "' is a ", module.get(paths[0])->type_name(),
                  ", not a module of one tensor in and one out");
    const TpKey in = l == spec.layer_begin ? boundary : key(l - 1);
    std::optional<TpKey> out;
    if (l + 1 == spec.layer_end) out = boundary;
    if (split(l) && !chained(l)) tokens = std::make_shared<int64_t>(0);
    const galvatron::TokenSplit ts{split(l), chained(l), chained(l + 1), split(l) ? tokens : nullptr};
    module.replace(paths[0], std::make_shared<GalvatronLayer>(inner, groups_, in, key(l), out,
                                                              plan_.layers[size_t(l)].checkpoint, ts));
  }
}

void GalvatronPlugin::configure(BoostedObjects& o) {
  auto module = o.model->module();
  auto* pm = dynamic_cast<nn::PipelineModule*>(module.get());
  BOOSTER_CHECK(pm != nullptr, "GalvatronPlugin: a layerwise plan needs a model that exposes its layers "
                "(nn::PipelineModule: ViTForImageClassification, Sequential); a ", module->type_name(), " does not");
  const int64_t L = pm->num_pipeline_layers();
  const int world = dist::world_size(), stage = groups_->stage_size();
  plan_ = opts_.plan(L);
  plan_.validate(world, L);
  if (dist::world_rank() == 0) spdlog::info("GalvatronPlugin: {} layers: {}", L, plan_.summary(world));

  broadcast_module_state(*module, dist::ProcessGroup::world());  // every rank from world rank 0's weights
  shard_layers(*module, *pm);
  nn::StageSpec spec{0, L, true, true};
  if (pp_deg_ > 1) {
    stages_ = std::make_unique<pipeline::PipelineStageManager>(groups_->pp(), 1, plan_.stage_layers());
    pipeline::keep_stage_modules(*module, *pm, *stages_, o.optimizer.get());
    spec = stages_->stage_spec(L);
  }
  wrap_layers(*module, *pm, spec);

  const LayerIndex index(*pm);
  auto key_of_name = [&](const std::string& name) {
    const int64_t l = index.of(name);
    return key_of(l < 0 ? plan_.boundary() : plan_.layers[size_t(l)], stage);
  };
  auto kind_of_name = [&](const std::string& name) {
    const int64_t l = index.of(name);
    return l < 0 ? (plan_.embed_sdp ? DpKind::zero3 : plan_.dp_kind({})) : plan_.dp_kind(plan_.layers[size_t(l)]);
  };
  // One engine: every parameter on its layer's data-parallel group, whole (DDP) or split.
  zero::ZeroOptions z;
  z.stage = 2;
  z.precision = opts_.mixed_precision;
  z.scaler = opts_.scaler;
  z.reduce_bucket_size_in_m = opts_.reduce_bucket_size_in_m;
  auto engine = zero::apply_zero(o, dist::ProcessGroup::world(), z, [&](const std::string& name) {
    return zero::PartPlacement{&groups_->dp(key_of_name(name)), kind_of_name(name) == DpKind::ddp};
  });
  if (engine) bucket_by_layer(*engine, *module, L, [&](const std::string& n) { return index.of(n); }, kind_of_name);
  o.model = std::make_shared<GalvatronModel>(o.model, groups_, pp_deg_);
  if (o.optimizer) {
    // Each parameter's tensor-parallel group; the engine already sums norms over the world.
    auto owners = std::make_shared<std::map<const void*, const dist::ProcessGroup*>>();
    for (auto& [name, p] : module->named_parameters()) {
      const TpKey k = key_of_name(name);
      (*owners)[p.impl()] = k.tp > 1 && !k.sp ? &groups_->tp(k) : nullptr;
    }
    shardformer::TensorParallelGroups tg;
    tg.tp_of = [owners](const Tensor& p) -> const dist::ProcessGroup* {
      auto it = owners->find(p.impl());
      return it == owners->end() ? nullptr : it->second;
    };
    tg.reduce = [](double v, bool) { return v; };
    auto hpo = std::make_shared<shardformer::HybridParallelOptimizer>(o.optimizer, std::move(tg), 0.0);
    if (stages_) hpo->count_elsewhere(pipeline::tied_copies(*module, *pm, *stages_));  // the first stage counts a tied head
    o.optimizer = hpo;
  }
  if (pp_deg_ > 1) {
    pipeline::ScheduleOptions so;
    so.num_microbatches = plan_.chunks > 0 ? plan_.chunks : 0;
    so.microbatch_size = plan_.chunks > 0 ? 0 : 4;
    if (plan_.pipeline_type == "gpipe") schedule_ = std::make_unique<pipeline::GPipeSchedule>(*stages_, so);
    else schedule_ = std::make_unique<pipeline::OneForwardOneBackwardSchedule>(*stages_, so);
  }
}

PipelineResult GalvatronPlugin::execute_pipeline(const DataIter& data_iter, ModelWrapper& model,
                                                 const StageCriterion& criterion, OptimizerWrapper* optimizer,
                                                 bool return_loss, bool return_outputs) {
  if (pp_deg_ == 1) return Plugin::execute_pipeline(data_iter, model, criterion, optimizer, return_loss, return_outputs);
  BOOSTER_CHECK(schedule_ != nullptr, "GalvatronPlugin.execute_pipeline: boost the model first");
  return schedule_->forward_backward_step(model, data_iter, criterion, optimizer, return_loss, return_outputs);
}

std::shared_ptr<CheckpointIO> GalvatronPlugin::get_checkpoint_io() {
  return checkpoint_io_.get(name(), groups_->stage_size() / vtp_, vtp_, pp_deg_, opts_.mixed_precision);
}

}  // namespace booster::plugins
