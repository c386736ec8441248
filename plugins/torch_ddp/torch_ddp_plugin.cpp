// TorchDDPPlugin (see torch_ddp_plugin.h).
#include "plugins/torch_ddp/torch_ddp_plugin.h"

#include "booster/plugin_options.h"
#include "core/dist/runtime.h"

namespace booster::plugins {

TorchDDPOptions TorchDDPOptions::from_config(const Config& cfg, const std::string& t) {
  static const auto binder = OptionBinder<TorchDDPOptions>()
                                 .add("broadcast_buffers", &TorchDDPOptions::broadcast_buffers)
                                 .add("bucket_cap_mb", &TorchDDPOptions::bucket_cap_mb)
                                 .add("find_unused_parameters", &TorchDDPOptions::find_unused_parameters)
                                 .add("check_reduction", &TorchDDPOptions::check_reduction)
                                 .add("gradient_as_bucket_view", &TorchDDPOptions::gradient_as_bucket_view)
                                 .add("static_graph", &TorchDDPOptions::static_graph);
  return options_from(cfg, t, "torch_ddp", binder);
}

TorchDDPPlugin::TorchDDPPlugin(TorchDDPOptions opts) : opts_(opts) {
  BOOSTER_CHECK(opts_.bucket_cap_mb > 0, "TorchDDPPlugin: bucket_cap_mb must be positive, got ", opts_.bucket_cap_mb);
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "TorchDDPPlugin: call dist::launch_from_openmpi() before creating the plugin (Colossal-AI asserts "
                  "dist.is_initialized() too)");
}

void TorchDDPPlugin::configure(BoostedObjects& o) {
  o.model = std::make_shared<TorchDDPModel>(o.model, dist::ProcessGroup::world(), opts_.reducer(), opts_.broadcast_buffers);
}

// Precision belongs to the Booster's mixed-precision layer, not to DDP.
std::shared_ptr<CheckpointIO> TorchDDPPlugin::get_checkpoint_io() { return checkpoint_io_.get(name(), dist::world_size(), 1, 1, ""); }

}  // namespace booster::plugins
