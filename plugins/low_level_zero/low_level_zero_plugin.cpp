// LowLevelZeroPlugin (see low_level_zero_plugin.h).
#include "plugins/low_level_zero/low_level_zero_plugin.h"

#include <cmath>

#include "booster/checkpoint/general_checkpoint_io.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/runtime.h"
#include "booster/plugin_options.h"

namespace booster::plugins {

LowLevelZeroOptions LowLevelZeroOptions::from_config(const Config& cfg, const std::string& t) {
  using O = LowLevelZeroOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("stage", &O::stage, "1 or 2")
        .add("precision", &O::precision, "fp16, bf16 or fp32")
        .add("max_norm", &O::max_norm)
        .add("norm_type", &O::norm_type)
        .add("reduce_bucket_size_in_m", &O::reduce_bucket_size_in_m, "millions of elements a bucket")
        .add("communication_dtype", &O::communication_dtype, "\"\" (the gradients'), fp16, bf16 or fp32")
        .add("overlap_communication", &O::overlap_communication)
        .add("overlap_allgather", &O::overlap_allgather)
        .add("cpu_offload", &O::cpu_offload, "masters and optimizer states on local disk")
        .add("offload_dir", &O::offload_dir, "folder of the disk tier (\"\": default_offload_dir(), the run's)")
        .add("master_weights", &O::master_weights)
        .add("verbose", &O::verbose)
        .add("cast_inputs", &O::cast_inputs);
    return bind_loss_scale(b, &O::scaler);
  }();
  return options_from(cfg, t, "low_level_zero", binder);
}

void LowLevelZeroOptions::validate() const {
  const char* who = "LowLevelZeroPlugin: ";
  BOOSTER_CHECK(stage == 1 || stage == 2, who, "stage must be 1 or 2, got ", stage,
                " (ZeRO-3 is GeminiPlugin)");
  BOOSTER_CHECK(precision == "fp16" || precision == "bf16" || precision == "fp32", who,
                "precision must be one of fp16, bf16, fp32, got '", precision, "'");
  BOOSTER_CHECK(reduce_bucket_size_in_m > 0, who, "reduce_bucket_size_in_m must be positive, got ",
                reduce_bucket_size_in_m);
  BOOSTER_CHECK(norm_type == 2.0, who, "norm_type must be 2.0 (the norm that clips across partitions), got ",
                norm_type);
  BOOSTER_CHECK(communication_dtype.empty() || communication_dtype == "fp16" || communication_dtype == "bf16" ||
                    communication_dtype == "fp32",
                who, "communication_dtype must be empty, fp16, bf16 or fp32, got '", communication_dtype, "'");
  BOOSTER_CHECK(max_norm >= 0, who, "max_norm must be >= 0, got ", max_norm);
  scaler.validate(who);
}

LowLevelZeroModel::LowLevelZeroModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<ZeroPartition> partition,
                                     std::shared_ptr<ZeroGrads> grads, DType input_dtype)
    : ModelWrapper(std::move(inner)), zp_(std::move(partition)), grads_(std::move(grads)), input_dtype_(input_dtype) {}

void LowLevelZeroModel::before_forward() {
  ModelWrapper::before_forward();
  if (zp_) zp_->wait_gather();
}

ShardedState LowLevelZeroModel::checkpoint_state() {
  ShardedState s = ModelWrapper::checkpoint_state();
  return zp_ ? zp_->substitute(std::move(s)) : s;
}

void LowLevelZeroModel::after_load() {
  ModelWrapper::after_load();
  if (zp_) zp_->after_load();
}

LowLevelZeroPlugin::LowLevelZeroPlugin(LowLevelZeroOptions opts) : opts_(std::move(opts)) {
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "LowLevelZeroPlugin: call dist::launch_from_openmpi() before creating the plugin");
}

void apply_low_level_zero(BoostedObjects& o, const dist::ProcessGroup& dp, const LowLevelZeroOptions& opts) {
  auto module = o.model->module();
  broadcast_module_state(*module, dp);  // in full precision, before the working copies
  const DType working = dtype_from_name(opts.precision);
  std::shared_ptr<ZeroPartition> zp;
  std::shared_ptr<ZeroGrads> grads;
  if (o.optimizer) {
    auto optim = o.optimizer->unwrap();
    optim::NamedParams params;
    for (auto& g : optim->param_groups())
      for (auto& np : g.params) params.push_back(np);
    auto store = opts.cpu_offload ? std::make_shared<OffloadStore>(opts.offload_dir) : nullptr;
    zp = std::make_shared<ZeroPartition>(params, dp, working, opts.master_weights,
                                         opts.reduce_bucket_size_in_m * double(1 << 20), store, opts.offload_frac);
    const DType comm = opts.communication_dtype.empty() ? working : dtype_from_name(opts.communication_dtype);
    grads = std::make_shared<ZeroGrads>(*zp, opts.stage, opts.overlap_communication, comm);
    ZeroStepOptions so;
    so.precision = opts.precision;
    so.scaler = opts.scaler;
    so.max_norm = opts.max_norm;
    so.overlap_allgather = opts.overlap_allgather;
    o.optimizer = std::make_shared<LowLevelZeroOptimizer>(optim, zp, grads, so);
  }
  {
    // The rest of the module (frozen parameters, or all without an optimizer) in the working precision too.
    NoGradGuard ng;
    for (auto& [n, p] : module->named_parameters())
      if (is_floating(p.dtype()) && p.dtype() != working) Tensor(p).set_data(p.detach().to(working).contiguous());
  }
  o.model = std::make_shared<LowLevelZeroModel>(o.model, zp, grads, opts.cast_inputs ? working : DType::f32);
}

void LowLevelZeroPlugin::configure(BoostedObjects& o) { apply_low_level_zero(o, dist::ProcessGroup::world(), opts_); }

std::shared_ptr<CheckpointIO> LowLevelZeroPlugin::get_checkpoint_io() {
  if (!checkpoint_io_)
    checkpoint_io_ = std::make_shared<GeneralCheckpointIO>(
        checkpoint_layout(name(), dist::world_size(), dist::world_size(), 1, 1, opts_.precision));
  return checkpoint_io_;
}

}  // namespace booster::plugins
