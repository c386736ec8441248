// Booster (see booster.h).
#include "booster/booster.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include "booster/auto_precision.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/mixed_precision.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/dispatch.h"
#include "nn/lazy.h"

#include <algorithm>

namespace booster {

Booster::Booster(std::shared_ptr<Plugin> plugin, const std::string& requested_precision, bool split_batch)
    : plugin_(std::move(plugin)), split_batch_(split_batch) {
  // "auto": bf16 where this CPU's bf16 matmul outruns fp32's (auto_precision.h); under a plugin
  // that controls precision its own option decides, so nothing is measured here.
  const bool plugin_owns = plugin_ && plugin_->control_precision();
  const std::string mixed_precision =
      requested_precision != "auto" ? requested_precision : plugin_owns ? "" : resolve_precision("auto");
  mixed_precision_ = mixed_precision == "fp32" || mixed_precision == "no" ? "" : mixed_precision;
  BOOSTER_CHECK(!split_batch_ || !plugin_ || plugin_->support_split_batch(), "Booster: plugin '", plugin_->name(),
                "' does not support split_batch (its parameters are gathered, sharded or hooked around the forward)");
  BOOSTER_CHECK(mixed_precision_.empty() || mixed_precision_ == "fp16" || mixed_precision_ == "bf16",
                "Booster: mixed_precision '", mixed_precision, "' is not one of \"fp16\", \"bf16\", \"fp32\", \"auto\"");
  if (plugin_ && plugin_->control_precision() && !mixed_precision_.empty()) {
    spdlog::warn("Booster: plugin '{}' controls precision; mixed_precision '{}' is ignored (set the plugin's "
                 "precision option instead)",
                 plugin_->name(), mixed_precision_);
    mixed_precision_.clear();
  }
  if (plugin_ && !mixed_precision_.empty()) {
    const auto sp = plugin_->supported_precisions();
    BOOSTER_CHECK(std::find(sp.begin(), sp.end(), mixed_precision_) != sp.end(), "Booster: plugin '", plugin_->name(),
                  "' does not support mixed_precision '", mixed_precision_, "'");
  }
}

void Booster::configure(BoostedObjects& o) {
  boosted_.push_back(o.model->module().get());
  kernels::set_fused_kernels(plugin_ ? plugin_->fused_kernels() : kernels::FusedKernels{});
  if (plugin_) plugin_->configure(o);
  BOOSTER_CHECK(o.model != nullptr, "Booster.boost: plugin '", plugin_ ? plugin_->name() : "", "' left no model");
  if (!mixed_precision_.empty()) {
    MixedPrecisionOptions mp;
    mp.precision = mixed_precision_;
    apply_mixed_precision(o, mp);
  }
  // What the plugin left lazy (nn::LazyInit) is what this rank keeps whole: made now, one
  // tensor at a time, in the dtype and region the plugin chose.
  nn::materialize(*o.model->module());
  o.model->set_split_batch(split_batch_);
  if (split_batch_)
    spdlog::info("Booster: split_batch: each of this rank's {} threads runs its own share of every training batch",
                 omp_get_max_threads());
}

NoSyncScope Booster::no_sync(ModelWrapper& model, OptimizerWrapper* optimizer) {
  BOOSTER_CHECK(plugin_ != nullptr, "Booster.no_sync: there is no plugin, so nothing to skip");
  BOOSTER_CHECK(plugin_->support_no_sync(), "Booster.no_sync: plugin '", plugin_->name(), "' does not support no_sync");
  return plugin_->no_sync(model, optimizer);
}

double Booster::mean_loss(const Tensor& loss) const {
  const std::optional<double> mine = loss.defined() ? std::optional<double>(loss.item()) : std::nullopt;
  return dist::is_initialized() ? dist::mean_where_held(mine) : mine.value_or(0.0);
}

std::vector<double> Booster::sum_over_replicas(const std::vector<double>& totals, bool held) const {
  if (!dist::is_initialized() || dist::world_size() == 1) return held ? totals : std::vector<double>(totals.size(), 0.0);
  const int dp = plugin_ ? plugin_->dp_size() : dist::world_size();  // without a plugin each rank is a replica
  // One all-reduce: the totals, and last how many ranks held outputs.
  std::vector<float> mine(totals.size() + 1, 0.0f);
  if (held)
    for (size_t i = 0; i < totals.size(); ++i) mine[i] = float(totals[i]);
  mine.back() = held ? 1.0f : 0.0f;
  Tensor t = Tensor::from_vector(mine, {int64_t(mine.size())});
  dist::all_reduce(t);
  std::vector<double> out;
  for (float v : t.to_vector()) out.push_back(double(v));
  const double copies = std::max(1.0, out.back() / double(std::max(dp, 1)));
  out.pop_back();
  for (double& v : out) v /= copies;
  return out;
}

PipelineResult Booster::execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                         OptimizerWrapper* optimizer, bool return_loss, bool return_outputs) {
  if (!plugin_) return run_as_one_stage(data_iter, model, criterion, optimizer, return_loss, return_outputs);
  return plugin_->execute_pipeline(data_iter, model, criterion, optimizer, return_loss, return_outputs);
}

CheckpointIO& Booster::checkpoint_io() {
  if (checkpoint_io_) return *checkpoint_io_;
  if (plugin_ && plugin_->control_checkpoint_io()) checkpoint_io_ = plugin_->get_checkpoint_io();
  if (!checkpoint_io_)
    checkpoint_io_ = std::make_shared<GeneralCheckpointIO>(checkpoint_layout(plugin_ ? plugin_->name() : "none", 1, 1, 1, 1, ""));
  if (!plugin_ || !plugin_->control_precision()) checkpoint_io_->set_precision(mixed_precision_.empty() ? "fp32" : mixed_precision_);
  return *checkpoint_io_;
}

void Booster::save_model(ModelWrapper& model, const std::string& checkpoint, bool shard, const std::string& prefix,
                         int64_t size_per_shard, bool use_async) {
  checkpoint_io().save_model(model, checkpoint, shard, prefix, size_per_shard, use_async);
}
void Booster::load_model(ModelWrapper& model, const std::string& checkpoint, bool strict) {
  checkpoint_io().load_model(model, checkpoint, strict);
}
void Booster::save_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint, bool shard,
                             const std::string& prefix, int64_t size_per_shard, bool use_async) {
  checkpoint_io().save_optimizer(optimizer, checkpoint, shard, prefix, size_per_shard, use_async);
}
void Booster::load_optimizer(OptimizerWrapper& optimizer, const std::string& checkpoint) {
  checkpoint_io().load_optimizer(optimizer, checkpoint);
}
void Booster::save_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint) {
  checkpoint_io().save_lr_scheduler(lr_scheduler, checkpoint);
}
void Booster::load_lr_scheduler(optim::LRScheduler& lr_scheduler, const std::string& checkpoint) {
  checkpoint_io().load_lr_scheduler(lr_scheduler, checkpoint);
}

}  // namespace booster
