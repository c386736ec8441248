// GeneralCheckpointIO (see general_checkpoint_io.h).
#include "booster/checkpoint/general_checkpoint_io.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "booster/checkpoint/tensor_store.h"
#include "core/autograd/grad_mode.h"
#include "core/comm/collectives.h"
#include "core/comm/runtime.h"

namespace booster {

namespace {

bool is_writer() { return !dist::is_initialized() || dist::world_rank() == 0; }

// Runs the write on rank 0; every rank learns whether it succeeded (no rank hangs or
// continues past a failed save).
void on_writer(const std::function<void()>& write, const std::string& what) {
  std::string error;
  if (is_writer()) {
    try {
      write();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (dist::is_initialized() && dist::world_size() > 1) {
    const double failed = dist::all_reduce_scalar(error.empty() ? 0.0 : 1.0, dist::ReduceOp::max);
    BOOSTER_CHECK_T(IOError, failed == 0.0, what, " failed on rank 0", error.empty() ? "" : ": " + error);
  }
  BOOSTER_CHECK_T(IOError, error.empty(), what, " failed: ", error);
}

ckpt::SaveOptions options(bool shard, const std::string& prefix, int64_t mb, const std::string& kind,
                          const proto::Layout& layout) {
  BOOSTER_CHECK(mb > 0 && mb <= 1024, "size_per_shard must be in [1, 1024] MB (protobuf messages stay below 2 GB), got ",
                mb);
  ckpt::SaveOptions o;
  o.shard = shard;
  o.prefix = prefix;
  o.max_shard_bytes = size_t(mb) << 20;
  o.kind = kind;
  o.layout = layout;
  return o;
}

}  // namespace

void GeneralCheckpointIO::save_model(BoostedModel& model, const std::string& path, bool shard, const std::string& prefix,
                                     int64_t size_per_shard_mb) {
  auto opts = options(shard, prefix, size_per_shard_mb, "model", layout_);
  on_writer([&] { ckpt::save_tensors(path, model.checkpoint_state(), opts); }, "save_model to '" + path + "'");
}

void GeneralCheckpointIO::load_model(BoostedModel& model, const std::string& path, bool strict) {
  auto loaded = ckpt::load_tensors(path, "model");
  nn::LoadResult r = model.load_checkpoint_state(loaded.tensors, strict);
  if (!r.ok()) {
    std::string msg;
    for (auto& k : r.missing_keys) msg += "\n  missing: " + k;
    for (auto& k : r.unexpected_keys) msg += "\n  unexpected: " + k;
    for (auto& k : r.mismatched) msg += "\n  size mismatch: " + k;
    spdlog::warn("load_model from '{}' (strict = false) left these out:{}", path, msg);
  }
}

void GeneralCheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& path, bool shard,
                                         const std::string& prefix, int64_t size_per_shard_mb) {
  const optim::OptimizerStateDict sd = optimizer.state_dict();
  proto::OptimizerMeta meta;
  meta.set_type(sd.type);
  for (auto& g : sd.param_groups) {
    auto* pg = meta.add_groups();
    for (auto& [k, v] : g.options) (*pg->mutable_options())[k] = v;
    for (auto& n : g.param_names) pg->add_param_names(n);
  }
  for (auto& [k, v] : sd.extra) (*meta.mutable_extra())[k] = v;
  nn::StateDict tensors;
  for (auto& [name, st] : sd.state) {
    (*meta.mutable_steps())[name] = st.step;
    for (auto& [k, t] : st.buffers) tensors.emplace_back(name + "/" + k, t);
  }
  auto opts = options(shard, prefix, size_per_shard_mb, "optimizer", layout_);
  opts.optimizer = &meta;
  on_writer([&] { ckpt::save_tensors(path, tensors, opts); }, "save_optimizer to '" + path + "'");
}

void GeneralCheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& path) {
  auto loaded = ckpt::load_tensors(path, "optimizer");
  const auto& meta = loaded.index.optimizer();
  optim::OptimizerStateDict sd;
  sd.type = meta.type();
  for (auto& g : meta.groups()) {
    optim::OptimizerStateDict::Group gs;
    for (auto& [k, v] : g.options()) gs.options[k] = v;
    gs.param_names.assign(g.param_names().begin(), g.param_names().end());
    sd.param_groups.push_back(std::move(gs));
  }
  for (auto& [name, step] : meta.steps()) sd.state[name].step = step;
  for (auto& [k, v] : meta.extra()) sd.extra[k] = v;
  for (auto& [key, t] : loaded.tensors) {
    const auto slash = key.rfind('/');
    BOOSTER_CHECK_T(IOError, slash != std::string::npos, loaded.source, ": optimizer tensor '", key,
                    "' is not named <parameter>/<state>");
    const std::string pname = key.substr(0, slash);
    BOOSTER_CHECK_T(IOError, sd.state.count(pname), loaded.source, ": state '", key, "' for a parameter with no step count");
    sd.state[pname].buffers[key.substr(slash + 1)] = t;
  }
  optimizer.load_state_dict(sd);
}

void GeneralCheckpointIO::save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) {
  const auto s = scheduler.state_dict();
  proto::SchedulerState m;
  m.set_type(s.type);
  m.set_last_epoch(s.last_epoch);
  for (double b : s.base_lrs) m.add_base_lrs(b);
  on_writer([&] { ckpt::write_message_file(path, m); }, "save_lr_scheduler to '" + path + "'");
}

void GeneralCheckpointIO::load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& path) {
  proto::SchedulerState m;
  ckpt::read_message_file(path, m, "scheduler state");
  scheduler.load_state_dict({m.type(), m.last_epoch(), std::vector<double>(m.base_lrs().begin(), m.base_lrs().end())});
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

void save_progress(const std::string& path, const proto::TrainingProgress& p) {
  on_writer([&] { ckpt::write_message_file(path, p); }, "saving training progress to '" + path + "'");
}

proto::TrainingProgress load_progress(const std::string& path) {
  proto::TrainingProgress p;
  ckpt::read_message_file(path, p, "training progress");
  return p;
}

}  // namespace booster
