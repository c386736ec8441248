// TorchDDPPlugin (see torch_ddp_plugin.h).
#include "plugins/torch_ddp/torch_ddp_plugin.h"

#include "booster/checkpoint/general_checkpoint_io.h"
#include "core/autograd/grad_mode.h"
#include "core/comm/runtime.h"

namespace booster::plugins {

namespace {

// The optimizer users hold under DDP: gradients are synchronized before they are read.
class DDPOptimizer : public OptimizerWrapper {
 public:
  DDPOptimizer(std::shared_ptr<optim::Optimizer> o, std::shared_ptr<Reducer> r)
      : OptimizerWrapper(std::move(o)), reducer_(std::move(r)) {}

 protected:
  void sync_grads() override { reducer_->finish(); }

 private:
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace

ConfigSchema TorchDDPOptions::schema(const std::string& t) {
  TorchDDPOptions d;
  ConfigSchema s;
  s.add(t + ".name", ConfigType::string, "torch_ddp")
      .add(t + ".broadcast_buffers", ConfigType::boolean, d.broadcast_buffers)
      .add(t + ".bucket_cap_mb", ConfigType::floating, d.bucket_cap_mb)
      .add(t + ".find_unused_parameters", ConfigType::boolean, d.find_unused_parameters)
      .add(t + ".check_reduction", ConfigType::boolean, d.check_reduction)
      .add(t + ".gradient_as_bucket_view", ConfigType::boolean, d.gradient_as_bucket_view)
      .add(t + ".static_graph", ConfigType::boolean, d.static_graph);
  return s;
}

TorchDDPOptions TorchDDPOptions::from_config(const Config& cfg_in, const std::string& t) {
  Config cfg = cfg_in;
  // Validate only this table: other tables belong to other readers.
  ConfigSchema s = schema(t);
  for (auto& top : cfg.keys(""))
    if (top != t) s.open_table(top);
  cfg.apply(s);
  TorchDDPOptions o;
  o.broadcast_buffers = cfg.get_bool(t + ".broadcast_buffers");
  o.bucket_cap_mb = cfg.get_float(t + ".bucket_cap_mb");
  o.find_unused_parameters = cfg.get_bool(t + ".find_unused_parameters");
  o.check_reduction = cfg.get_bool(t + ".check_reduction");
  o.gradient_as_bucket_view = cfg.get_bool(t + ".gradient_as_bucket_view");
  o.static_graph = cfg.get_bool(t + ".static_graph");
  return o;
}

TorchDDPPlugin::TorchDDPPlugin(TorchDDPOptions opts) : opts_(opts) {
  BOOSTER_CHECK(opts_.bucket_cap_mb > 0, "TorchDDPPlugin: bucket_cap_mb must be positive, got ", opts_.bucket_cap_mb);
  BOOSTER_CHECK_T(BackendError, dist::is_initialized(),
                  "TorchDDPPlugin: call dist::launch_from_openmpi() before creating the plugin (Colossal-AI asserts "
                  "dist.is_initialized() too)");
}

void TorchDDPPlugin::configure(BoostedObjects& o) {
  BOOSTER_CHECK(o.model != nullptr, "TorchDDPPlugin.configure: a model is required");
  const auto& world = dist::ProcessGroup::world();
  auto module = o.model->module();
  {
    // Every rank starts from rank 0's weights.
    NoGradGuard ng;
    for (auto& [n, t] : module->state_dict()) {
      BOOSTER_CHECK(t.is_contiguous(), "TorchDDPPlugin: tensor '", n, "' must be contiguous to broadcast");
      Tensor x = t;
      dist::broadcast(x, 0, world);
    }
  }
  if (opts_.broadcast_buffers && !module->named_buffers().empty()) {
    o.model->add_pre_forward([module, &world] {
      NoGradGuard ng;
      for (auto& [n, t] : module->named_buffers()) {
        Tensor x = t;
        dist::broadcast(x, 0, world);
      }
    });
  }
  ReducerOptions ro{opts_.bucket_cap_mb, opts_.find_unused_parameters, opts_.gradient_as_bucket_view};
  reducer_ = std::make_shared<Reducer>(module->named_parameters(), world, ro);
  if (o.optimizer) o.optimizer = std::make_shared<DDPOptimizer>(o.optimizer->unwrap(), reducer_);
}

std::shared_ptr<CheckpointIO> TorchDDPPlugin::get_checkpoint_io() {
  if (!checkpoint_io_)  // precision belongs to the Booster's mixed-precision layer, not to DDP
    checkpoint_io_ = std::make_shared<GeneralCheckpointIO>(
        checkpoint_layout(name(), dist::world_size(), dist::world_size(), 1, 1, ""));
  return checkpoint_io_;
}

NoSyncScope TorchDDPPlugin::no_sync(BoostedModel&, OptimizerWrapper*) {
  BOOSTER_CHECK(reducer_ != nullptr, "TorchDDPPlugin.no_sync: boost() the model first");
  BOOSTER_CHECK(!reducer_->no_sync(), "TorchDDPPlugin.no_sync: already inside a no_sync scope");
  reducer_->set_no_sync(true);
  auto r = reducer_;
  return NoSyncScope([r] { r->set_no_sync(false); });
}

std::shared_ptr<data::DataLoader> TorchDDPPlugin::prepare_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                                                     const DataLoaderArgs& a) {
  auto sampler = std::make_shared<data::DistributedSampler>(dataset->size(), dist::world_size(), dist::world_rank(),
                                                            a.shuffle, a.seed, a.drop_last);
  data::DataLoaderOptions lo;
  lo.batch_size = a.batch_size;
  lo.drop_last = a.drop_last;
  lo.num_workers = a.num_workers;
  lo.seed = a.seed;
  return std::make_shared<data::DataLoader>(std::move(dataset), lo, sampler);
}

}  // namespace booster::plugins
