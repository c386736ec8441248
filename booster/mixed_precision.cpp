// Mixed precision (see mixed_precision.h).
#include "booster/mixed_precision.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <map>

#include "core/autograd/grad_mode.h"
#include "core/comm/collectives.h"
#include "core/comm/runtime.h"
#include "core/common/profiler.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::shared_ptr<OptimizerWrapper> inner,
                                                 std::vector<std::pair<Tensor, Tensor>> param_master,
                                                 MixedPrecisionOptions opts)
    : OptimizerWrapper(inner->unwrap()), inner_(std::move(inner)), param_master_(std::move(param_master)),
      opts_(opts), fp16_(opts.precision == "fp16"), scaler_(opts.scaler) {}

void MixedPrecisionOptimizer::backward(const Tensor& loss, bool retain_graph) {
  inner_->backward(fp16_ ? scale(loss, scaler_.scale()) : loss, retain_graph);
}

void MixedPrecisionOptimizer::backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph) {
  inner_->backward_by_grad(tensor, fp16_ ? scale(grad, scaler_.scale()) : grad, retain_graph);
}

bool MixedPrecisionOptimizer::found_nonfinite_on_any_rank() {
  ProfileScope prof_("non-finite check");
  bool bad = false;
  for (auto& [p, m] : param_master_) {
    Tensor g = p.grad();
    if (g.defined() && !kernels::all_finite(g)) {
      bad = true;
      break;
    }
  }
  if (dist::is_initialized() && dist::world_size() > 1)
    bad = dist::all_reduce_scalar(bad ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  return bad;
}

double MixedPrecisionOptimizer::clip_grad_by_norm(double max_norm, double norm_type, bool error_if_nonfinite) {
  inner_->synchronize();
  std::vector<Tensor> params;
  for (auto& [p, m] : param_master_) params.push_back(p);
  const double norm = optim::grad_norm(params, norm_type, inner_->reducer()) / loss_scale();  // in double
  BOOSTER_CHECK(!error_if_nonfinite || std::isfinite(norm), "clip_grad_by_norm: the total norm is ", norm);
  grad_norm_ = norm;
  pending_max_norm_ = max_norm;
  return norm;
}

void MixedPrecisionOptimizer::clip_grad_by_value(double clip_value) {
  inner_->synchronize();
  std::vector<Tensor> params;
  for (auto& [p, m] : param_master_) params.push_back(p);
  optim::clip_grad_value(params, clip_value * loss_scale());  // gradients are still scaled
}

void MixedPrecisionOptimizer::step() {
  inner_->synchronize();
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
    inner_->zero_grad();
    return;
  }
  double div = loss_scale();
  if (pending_max_norm_ > 0 && grad_norm_) {
    const double clip = (*grad_norm_ + 1e-6) / pending_max_norm_;
    if (clip > 1) div *= clip;
  }
  pending_max_norm_ = 0;
  optim_->set_grad_divisor(div);  // unscale and clip inside the fused update
  optim_->step();
  optim_->set_grad_divisor(1.0);
  {
    ProfileScope prof_("refresh compute copies");
    NoGradGuard ng;
    for (auto& [p, m] : param_master_) {
      Tensor t = p;
      t.copy_(m);  // refresh the low-precision compute copy
    }
  }
  if (fp16_) scaler_.update(false);
}

optim::OptimizerStateDict MixedPrecisionOptimizer::state_dict() const {
  auto sd = inner_->state_dict();
  sd.extra["loss_scale"] = scaler_.scale();
  sd.extra["growth_step"] = double(scaler_.growth_step());
  sd.extra["hysteresis_step"] = double(scaler_.hysteresis_step());
  return sd;
}

void MixedPrecisionOptimizer::load_state_dict(const optim::OptimizerStateDict& sd) {
  inner_->load_state_dict(sd);
  if (sd.extra.count("loss_scale"))
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
  auto module = o.model->module();
  std::vector<std::pair<Tensor, Tensor>> pm;
  std::map<std::string, Tensor> masters;
  {
    NoGradGuard ng;
    for (auto& [name, p] : module->named_parameters()) {
      Tensor param = p;
      Tensor master = param.detach().to(DType::f32).contiguous().clone();
      if (o.optimizer) o.optimizer->unwrap()->set_master(name, master);
      param.set_data(param.detach().to(low).contiguous());  // same handle, low-precision storage
      pm.emplace_back(param, master);
      masters[name] = master;
    }
  }
  o.model->set_input_dtype(low);
  // Checkpoints hold the fp32 masters, and loading refreshes both.
  o.model->set_checkpoint_hooks(
      [module, masters] {
        nn::StateDict sd = module->state_dict();
        for (auto& [n, t] : sd)
          if (masters.count(n)) t = masters.at(n);
        return sd;
      },
      [module, masters](const nn::StateDict& sd, bool strict) {
        nn::LoadResult r = module->load_state_dict(sd, strict);
        NoGradGuard ng;
        for (auto& [n, t] : sd) {
          auto it = masters.find(n);
          if (it != masters.end() && it->second.shape() == t.shape()) Tensor(it->second).copy_(t);
        }
        return r;
      });
  if (o.optimizer) o.optimizer = std::make_shared<MixedPrecisionOptimizer>(o.optimizer, pm, opts);
}

}  // namespace booster
