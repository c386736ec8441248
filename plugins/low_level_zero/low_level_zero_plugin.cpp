// LowLevelZeroPlugin (see low_level_zero_plugin.h).
#include "plugins/low_level_zero/low_level_zero_plugin.h"

#include <cmath>

#include "booster/auto_precision.h"
#include "core/dist/runtime.h"
#include "booster/plugin_options.h"

namespace booster::plugins {

LowLevelZeroOptions LowLevelZeroOptions::from_config(const Config& cfg, const std::string& t) {
  using O = LowLevelZeroOptions;
  static const auto binder = [] {
    OptionBinder<O> b;
    b.add("stage", &O::stage, "1 or 2")
        .add("precision", &O::precision, "fp16, bf16, fp32 or auto")
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
  validate_common(who);
  BOOSTER_CHECK(reduce_bucket_size_in_m > 0, who, "reduce_bucket_size_in_m must be positive, got ",
                reduce_bucket_size_in_m);
  BOOSTER_CHECK(norm_type == 2.0, who, "norm_type must be 2.0 (the norm that clips across partitions), got ",
                norm_type);
  BOOSTER_CHECK(max_norm >= 0, who, "max_norm must be >= 0, got ", max_norm);
}

LowLevelZeroPlugin::LowLevelZeroPlugin(LowLevelZeroOptions opts) : opts_(std::move(opts)) {
  // "auto": what this CPU runs faster, measured once a process (booster/auto_precision.h).
  opts_.precision = resolve_precision(opts_.precision);
  opts_.validate();
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "LowLevelZeroPlugin: call dist::launch_from_openmpi() before creating the plugin");
}

void LowLevelZeroPlugin::configure(BoostedObjects& o) { zero::apply_zero(o, dist::ProcessGroup::world(), opts_); }

std::shared_ptr<CheckpointIO> LowLevelZeroPlugin::get_checkpoint_io() { return checkpoint_io_.get(name(), dist::world_size(), 1, 1, opts_.precision); }

}  // namespace booster::plugins
