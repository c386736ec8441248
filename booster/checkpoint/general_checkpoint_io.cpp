// GeneralCheckpointIO (see general_checkpoint_io.h).
#include "booster/checkpoint/general_checkpoint_io.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "booster/checkpoint/state_io.h"
#include "booster/checkpoint/tensor_store.h"
#include "core/dist/runtime.h"

namespace booster {

namespace {

bool is_writer() { return !dist::is_initialized() || dist::world_rank() == 0; }

// Runs the write on rank 0; every rank learns whether it succeeded (no rank hangs or
// continues past a failed save).
void on_writer(const std::function<void()>& write, const std::string& what) {
  ckpt::on_every_rank([&] { if (is_writer()) write(); }, what);
}

ckpt::SaveOptions options(bool shard, const std::string& prefix, int64_t mb, const std::string& kind,
                          const proto::Layout& layout) {
  // Records are separate messages of at most 64 MB, so a shard file may be of any size.
  BOOSTER_CHECK(mb > 0, "size_per_shard must be a positive number of MB, got ", mb);
  ckpt::SaveOptions o;
  o.shard = shard;
  o.prefix = prefix;
  o.max_shard_bytes = size_t(mb) << 20;
  o.kind = kind;
  o.layout = layout;
  return o;
}

}  // namespace

void GeneralCheckpointIO::save_model(ModelWrapper& model, const std::string& path, bool shard, const std::string& prefix,
                                     int64_t size_per_shard_mb, bool use_async) {
  const auto opts = options(shard, prefix, size_per_shard_mb, "model", layout_);
  if (use_async) return ckpt::save_state_async(path, model.checkpoint_state(), opts, async_, staging_bytes_);
  async_.synchronize();
  ckpt::save_state(path, model.checkpoint_state(), opts);
}

void GeneralCheckpointIO::load_model(ModelWrapper& model, const std::string& path, bool strict) {
  async_.synchronize();
  std::unique_ptr<ckpt::CheckpointReader> r;
  ckpt::on_every_rank([&] { r = std::make_unique<ckpt::CheckpointReader>(path, "model"); }, "load_model from '" + path + "'");
  const ckpt::LoadReport rep = ckpt::load_state(*r, model.checkpoint_state(), strict, "load_model from '" + path + "'");
  model.after_load();
  if (!rep.ok() && is_writer()) spdlog::warn("load_model from '{}' (strict = false) left these out:{}", path, rep.str());
}

void GeneralCheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& path, bool shard,
                                         const std::string& prefix, int64_t size_per_shard_mb, bool use_async) {
  if (!use_async) async_.synchronize();
  const ckpt::OptimizerShare share = ckpt::optimizer_share(optimizer);
  auto opts = options(shard, prefix, size_per_shard_mb, "optimizer", layout_);
  opts.optimizer = &share.meta;
  if (use_async) return ckpt::save_state_async(path, share.tensors, opts, async_, staging_bytes_);
  ckpt::save_state(path, share.tensors, opts);
}

void GeneralCheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& path) {
  async_.synchronize();
  std::unique_ptr<ckpt::CheckpointReader> r;
  ckpt::on_every_rank([&] { r = std::make_unique<ckpt::CheckpointReader>(path, "optimizer"); },
                      "load_optimizer from '" + path + "'");
  ckpt::load_optimizer_share(*r, optimizer);
}

void GeneralCheckpointIO::save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) {
  const auto s = scheduler.state_dict();
  proto::SchedulerState m;
  m.set_type(s.type);
  m.set_last_epoch(s.last_epoch);
  for (double b : s.base_lrs) m.add_base_lrs(b);
  on_writer([&] { ckpt::write_message_file(path, m); }, "save_lr_scheduler to '" + path + "'");
}

void GeneralCheckpointIO::after_saves(const std::function<void()>& task, const std::string& what) {
  if (!async_.pending()) return ckpt::on_every_rank(task, what);
  async_.submit([task](const dist::ProcessGroup*) { task(); }, what);
}

void GeneralCheckpointIO::load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) {
  proto::SchedulerState m;
  ckpt::read_message_file(path, m, "scheduler state");
  scheduler.load_state_dict({m.type(), m.last_epoch(), std::vector<double>(m.base_lrs().begin(), m.base_lrs().end())});
}

std::shared_ptr<CheckpointIO> LayoutCheckpointIO::get(const std::string& plugin, int dp, int tp, int pp,
                                                      const std::string& precision) {
  if (!io_) io_ = std::make_shared<GeneralCheckpointIO>(checkpoint_layout(plugin, dist::world_size(), dp, tp, pp, precision));
  return io_;
}

proto::Layout checkpoint_layout(const std::string& plugin, int world_size, int dp, int tp, int pp,
                                const std::string& precision) {
  proto::Layout l;
  l.set_plugin(plugin);
  l.set_world_size(world_size);
  l.set_dp_size(dp);
  l.set_tp_size(tp);
  l.set_pp_size(pp);
  l.set_precision(precision);
  return l;
}

proto::TrainingProgress load_progress(const std::string& path) {
  proto::TrainingProgress p;
  ckpt::read_message_file(path, p, "training progress");
  return p;
}

}  // namespace booster
