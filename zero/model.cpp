// LowLevelZeroModel and apply_zero (see model.h).
#include "zero/model.h"

#include "booster/plugin.h"
#include "core/autograd/grad_mode.h"
#include "core/tensor/lazy.h"

namespace booster::zero {

LowLevelZeroModel::LowLevelZeroModel(std::shared_ptr<ModelWrapper> inner, std::shared_ptr<Engine> engine,
                                     DType input_dtype)
    : ModelWrapper(std::move(inner)), eng_(std::move(engine)), input_dtype_(input_dtype) {}

void LowLevelZeroModel::before_forward() {
  ModelWrapper::before_forward();
  if (eng_) eng_->gatherer().wait_gather();
}

ShardedState LowLevelZeroModel::checkpoint_state() {
  ShardedState s = ModelWrapper::checkpoint_state();
  if (!eng_) return s;
  eng_->gatherer().wait_gather();
  return eng_->shards().substitute(std::move(s));
}

void LowLevelZeroModel::after_load() {
  ModelWrapper::after_load();
  if (eng_) eng_->gatherer().refresh_working();  // offloaded masters went back to the store as loaded
}

std::shared_ptr<Engine> apply_zero(BoostedObjects& o, const dist::ProcessGroup& dp, const ZeroOptions& opts,
                                   PartPlacer placer) {
  auto module = o.model->module();
  if (!placer) broadcast_module_state(*module, dp);  // in full precision, before the working copies
  const DType working = dtype_from_name(opts.precision);
  std::shared_ptr<Engine> engine;
  if (o.optimizer) {
    auto optim = o.optimizer->unwrap();
    optim::NamedParams params;
    for (auto& g : optim->param_groups())
      for (auto& np : g.params) params.push_back(np);
    engine = std::make_shared<Engine>(params, dp, opts, std::move(placer));
    ZeroStepOptions so;
    so.precision = opts.precision;
    so.scaler = opts.scaler;
    so.max_norm = opts.max_norm;
    so.overlap_allgather = opts.overlap_allgather;
    o.optimizer = std::make_shared<LowLevelZeroOptimizer>(optim, engine, so);
  }
  {
    // The rest of the module (frozen parameters, or all without an optimizer) in the working precision too.
    NoGradGuard ng;
    for (auto& [n, p] : module->named_parameters()) {
      if (!is_floating(p.dtype()) || p.dtype() == working) continue;
      if (is_lazy(p)) lazy_cast(p, working);
      else Tensor(p).set_data(p.detach().to(working).contiguous());
    }
  }
  o.model = std::make_shared<LowLevelZeroModel>(o.model, engine, opts.cast_inputs ? working : DType::f32);
  return engine;
}

}  // namespace booster::zero
