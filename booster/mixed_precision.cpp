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
    : OptimizerLeaf(std::move(optim)), masters_(std::move(masters)),
      scaling_(opts.precision, opts.scaler, opts.skip_nonfinite) {}

void MixedPrecisionOptimizer::backward(const Tensor& loss, bool retain_graph) {
  OptimizerLeaf::backward(scaling_.scale_loss(loss), retain_graph);
}

std::vector<Tensor> MixedPrecisionOptimizer::working_params() const {
  std::vector<Tensor> out;
  for (auto& e : masters_->entries()) out.push_back(e.param);
  return out;
}

bool MixedPrecisionOptimizer::found_nonfinite_on_any_rank() {
  ProfileScope prof_("non-finite check");
  std::vector<Tensor> grads;
  for (auto& e : masters_->entries()) grads.push_back(e.param.grad());
  bool bad = !kernels::all_finite(grads);
  if (dist::is_initialized() && dist::world_size() > 1)
    bad = dist::all_reduce_scalar(bad ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  return bad;
}

double MixedPrecisionOptimizer::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                          const optim::NormScope& scope) {
  const double norm = optim::grad_norm(working_params(), norm_type, scope) / scaling_.loss_scale();  // in double
  BOOSTER_CHECK(!error_if_nonfinite || std::isfinite(norm), "clip_grad_by_norm: the total norm is ", norm);
  scaling_.set_clip(norm, max_norm);
  return norm;
}

void MixedPrecisionOptimizer::clip_grad_by_value(double clip_value) {
  optim::clip_grad_value(working_params(), clip_value * scaling_.loss_scale());  // gradients are still scaled
}

void MixedPrecisionOptimizer::step() {
  if (!scaling_.begin_step(found_nonfinite_on_any_rank())) {
    zero_grad();
    return;
  }
  std::vector<optim::UpdateTarget> targets;
  for (auto& e : masters_->entries()) {
    Tensor g = e.param.grad();
    if (g.defined()) targets.push_back({e.name, e.master, g, e.param});
  }
  // Unscaling, clipping and the compute copies' refresh happen inside the update (a
  // parameter without a gradient keeps its master and its copy).
  optim_->step_on(targets, scaling_.take_divisor());
  scaling_.end_step();
}

optim::OptimizerStateDict MixedPrecisionOptimizer::with_scaler(optim::OptimizerStateDict sd) const {
  scaling_.save(sd.extra);
  return sd;
}

void MixedPrecisionOptimizer::load_state_dict(const optim::OptimizerStateDict& sd) {
  optim_->load_state_dict(sd);
  scaling_.load(sd.extra);
}

void apply_mixed_precision(BoostedObjects& o, const MixedPrecisionOptions& opts) {
  BOOSTER_CHECK(opts.precision == "bf16" || opts.precision == "fp16", "mixed precision must be \"bf16\" or \"fp16\", got \"",
                opts.precision, "\"");
  const DType low = dtype_from_name(opts.precision);
  if (kernels::matmul_implementation(low, 64, 64, 64).empty())
    spdlog::warn("mixed precision {0}: oneDNN has no {0} matmul kernel for this CPU ({0} needs {1}); matmuls compute "
                 "in f32 on {0} storage, which is usually slower than fp32 here",
                 opts.precision, low == DType::bf16 ? "AVX512-BF16 or AMX" : "AVX512-FP16 or AMX-FP16");
  auto masters = std::make_shared<MasterParams>(o.model->module()->named_parameters(), low);
  o.model = std::make_shared<MixedPrecisionModel>(o.model, masters);
  if (!o.optimizer) return;
  auto leaf = std::make_shared<MixedPrecisionOptimizer>(o.optimizer->unwrap(), masters, opts);
  if (auto* d = dynamic_cast<OptimizerDecorator*>(o.optimizer.get())) d->replace_leaf(leaf);
  else o.optimizer = leaf;
}

}  // namespace booster
