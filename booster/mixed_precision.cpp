// Mixed precision (see mixed_precision.h).
#include "booster/mixed_precision.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/common/profiler.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {

MixedPrecisionModel::MixedPrecisionModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<MasterParams> masters)
    : ModelWrapper(std::move(inner)), masters_(std::move(masters)) {}

void MixedPrecisionModel::after_load() {
  ModelWrapper::after_load();
  masters_->refresh_working();
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::shared_ptr<optim::Optimizer> optim,
                                                 std::shared_ptr<MasterParams> masters, MixedPrecisionOptions opts)
    : OptimizerWrapper(std::move(optim)), masters_(std::move(masters)), opts_(opts), fp16_(opts.precision == "fp16"),
      scaler_(opts.scaler) {}

void MixedPrecisionOptimizer::backward(const Tensor& loss, bool retain_graph) {
  OptimizerWrapper::backward(fp16_ ? scale(loss, scaler_.scale()) : loss, retain_graph);
}

void MixedPrecisionOptimizer::backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph) {
  OptimizerWrapper::backward_by_grad(tensor, fp16_ ? scale(grad, scaler_.scale()) : grad, retain_graph);
}

std::vector<Tensor> MixedPrecisionOptimizer::working_params() const {
  std::vector<Tensor> out;
  for (auto& e : masters_->entries()) out.push_back(e.param);
  return out;
}

bool MixedPrecisionOptimizer::found_nonfinite_on_any_rank() {
  ProfileScope prof_("non-finite check");
  bool bad = false;
  for (auto& e : masters_->entries()) {
    Tensor g = e.param.grad();
    if (g.defined() && !kernels::all_finite(g)) {
      bad = true;
      break;
    }
  }
  if (dist::is_initialized() && dist::world_size() > 1)
    bad = dist::all_reduce_scalar(bad ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  return bad;
}

double MixedPrecisionOptimizer::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                          const optim::NormReducer& reduce) {
  const double norm = optim::grad_norm(working_params(), norm_type, reduce) / loss_scale();  // in double
  BOOSTER_CHECK(!error_if_nonfinite || std::isfinite(norm), "clip_grad_by_norm: the total norm is ", norm);
  grad_norm_ = norm;
  pending_max_norm_ = max_norm;
  return norm;
}

void MixedPrecisionOptimizer::clip_grad_by_value(double clip_value) {
  optim::clip_grad_value(working_params(), clip_value * loss_scale());  // gradients are still scaled
}

void MixedPrecisionOptimizer::step() {
  ++steps_;
  last_skipped_ = found_nonfinite_on_any_rank();
  if (last_skipped_) {
    ++skipped_;
    pending_max_norm_ = 0;
    if (fp16_) {
      scaler_.update(true);
      spdlog::warn("step {}: non-finite gradient, step skipped; loss scale now {}", steps_, scaler_.scale());
    } else {
      BOOSTER_CHECK(opts_.skip_nonfinite, "bf16 step ", steps_, ": a gradient is non-finite (inf or NaN) on some rank");
      spdlog::warn("step {}: non-finite gradient under bf16, step skipped", steps_);
    }
    zero_grad();
    return;
  }
  double div = loss_scale();
  if (pending_max_norm_ > 0 && grad_norm_) {
    const double clip = (*grad_norm_ + 1e-6) / pending_max_norm_;
    if (clip > 1) div *= clip;
  }
  pending_max_norm_ = 0;
  std::vector<optim::UpdateTarget> targets;
  for (auto& e : masters_->entries()) {
    Tensor g = e.param.grad();
    if (g.defined()) targets.push_back({e.name, e.master, g});
  }
  optim_->step_on(targets, div);  // unscale and clip inside the fused update
  masters_->refresh_working();
  if (fp16_) scaler_.update(false);
}

optim::OptimizerStateDict MixedPrecisionOptimizer::with_scaler(optim::OptimizerStateDict sd) const {
  if (!fp16_) return sd;  // bf16 never scales: nothing to record
  sd.extra["loss_scale"] = scaler_.scale();
  sd.extra["growth_step"] = double(scaler_.growth_step());
  sd.extra["hysteresis_step"] = double(scaler_.hysteresis_step());
  return sd;
}

void MixedPrecisionOptimizer::load_state_dict(const optim::OptimizerStateDict& sd) {
  optim_->load_state_dict(sd);
  if (fp16_ && sd.extra.count("loss_scale"))
    scaler_.set_state(sd.extra.at("loss_scale"), int64_t(sd.extra.at("growth_step")),
                      int64_t(sd.extra.at("hysteresis_step")));
}

void apply_mixed_precision(BoostedObjects& o, const MixedPrecisionOptions& opts) {
  BOOSTER_CHECK(opts.precision == "bf16" || opts.precision == "fp16", "mixed precision must be \"bf16\" or \"fp16\", got \"",
                opts.precision, "\"");
  const DType low = opts.precision == "bf16" ? DType::bf16 : DType::f16;
  if (kernels::matmul_implementation(low, 64, 64, 64).empty())
    spdlog::warn("mixed precision {0}: oneDNN has no {0} matmul kernel for this CPU ({0} needs {1}); matmuls compute "
                 "in f32 on {0} storage, which is usually slower than fp32 here",
                 opts.precision, low == DType::bf16 ? "AVX512-BF16 or AMX" : "AVX512-FP16 or AMX-FP16");
  auto masters = std::make_shared<MasterParams>(o.model->module()->named_parameters(), low);
  o.model = std::make_shared<MixedPrecisionModel>(o.model, masters);
  if (!o.optimizer) return;
  auto leaf = std::make_shared<MixedPrecisionOptimizer>(o.optimizer->unwrap(), masters, opts);
  if (o.optimizer->inner()) o.optimizer->replace_leaf(leaf);
  else o.optimizer = leaf;
}

}  // namespace booster
