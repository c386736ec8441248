// HybridParallelPlugin's wrappers (see hybrid_parallel_wrappers.h).
#include "plugins/hybrid_parallel/hybrid_parallel_wrappers.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/functional.h"

namespace booster::plugins {

namespace {
// The dim along which a tensor-parallel shard splits its logical tensor, or -1 when whole.
int64_t split_dim(const Tensor& p) {
  const Region* r = p.region();
  if (!r) return -1;
  for (size_t d = 0; d < r->full.size(); ++d)
    if (r->extent[d] != r->full[d]) return int64_t(d);
  return -1;
}
// Calls f(state tensor, its parameter, its region, split dim) for every optimizer state
// tensor of a tensor-parallel shard in `sd` (those shaped like the parameter, or like the
// logical tensor when `logical`).
template <typename F>
void for_each_shard_state(OptimizerWrapper& o, optim::OptimizerStateDict& sd, bool logical, F&& f) {
  for (auto& g : o.param_groups())
    for (auto& [name, p] : g.params) {
      const int64_t d = split_dim(p);
      auto it = sd.state.find(name);
      if (d < 0 || it == sd.state.end()) continue;
      for (auto& [k, buf] : it->second.buffers)
        if (buf.shape() == (logical ? p.region()->full : p.shape())) f(buf, p, *p.region(), d);
    }
}

TensorParallelGroups mesh_groups(const std::shared_ptr<dist::ProcessGroupMesh>& mesh) {
  const auto* tp = &mesh->group("tp");
  const auto* pp = &mesh->group("pp");
  TensorParallelGroups g;
  g.tp_of = [tp](const Tensor&) { return tp; };
  g.reduce = [tp, pp](double local, bool is_max) {
    const auto op = is_max ? dist::ReduceOp::max : dist::ReduceOp::sum;
    double v = tp->size() > 1 ? dist::all_reduce_scalar(local, op, *tp) : local;
    return pp->size() > 1 ? dist::all_reduce_scalar(v, op, *pp) : v;
  };
  g.trivial = tp->size() == 1 && pp->size() == 1;
  return g;
}
}  // namespace

HybridParallelModule::HybridParallelModule(std::shared_ptr<ModelWrapper> inner,
                                           std::shared_ptr<dist::ProcessGroupMesh> mesh, int stage)
    : ModelWrapper(std::move(inner)), mesh_(std::move(mesh)), stage_(stage) {}

void HybridParallelModule::check_whole_forward() const {
  BOOSTER_CHECK(stage_ < 0, "HybridParallelPlugin: this rank is pipeline stage ", stage_, " of ", mesh_->size("pp"),
                " and holds only its layers; run the model with booster.execute_pipeline (training and evaluation)");
  ModelWrapper::check_whole_forward();
}

HybridParallelOptimizer::HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner,
                                                 std::shared_ptr<dist::ProcessGroupMesh> mesh, double max_norm)
    : OptimizerDecorator(std::move(inner)), mesh_(std::move(mesh)), groups_(mesh_groups(mesh_)), max_norm_(max_norm) {}

HybridParallelOptimizer::HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner, TensorParallelGroups groups,
                                                 double max_norm)
    : OptimizerDecorator(std::move(inner)), groups_(std::move(groups)), max_norm_(max_norm) {}

double HybridParallelOptimizer::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                          const optim::NormScope& outer) {
  if (groups_.trivial) return OptimizerDecorator::clip_norm(max_norm, norm_type, error_if_nonfinite, outer);
  optim::NormScope scope;
  scope.reduce = [this, outer](double local, bool is_max) { return outer.combine(groups_.reduce(local, is_max), is_max); };
  // A shard is this rank's own; a replicated parameter is the same on every rank of its tp group.
  scope.counts = [this, outer](const Tensor& p) {
    const dist::ProcessGroup* tp = groups_.tp_of(p);
    return (split_dim(p) >= 0 || !tp || tp->rank() == 0) && outer.count(p);
  };
  return OptimizerDecorator::clip_norm(max_norm, norm_type, error_if_nonfinite, scope);
}

void HybridParallelOptimizer::step() {
  if (max_norm_ > 0) clip_norm(max_norm_, 2.0, false, {});
  OptimizerDecorator::step();
}

optim::OptimizerStateDict HybridParallelOptimizer::state_dict() const {
  optim::OptimizerStateDict sd = OptimizerDecorator::state_dict();
  NoGradGuard ng;
  for_each_shard_state(*inner(), sd, false, [&](Tensor& buf, const Tensor& p, const Region&, int64_t d) {
    const dist::ProcessGroup* tp = groups_.tp_of(p);
    BOOSTER_CHECK(tp != nullptr, "HybridParallelOptimizer: a tensor-parallel shard without a tensor-parallel group");
    buf = dist::gather_forward_split_backward(buf, d, *tp);
  });
  return sd;
}

void HybridParallelOptimizer::load_state_dict(const optim::OptimizerStateDict& full) {
  optim::OptimizerStateDict sd = full;
  NoGradGuard ng;
  for_each_shard_state(*inner(), sd, true, [](Tensor& buf, const Tensor&, const Region& r, int64_t d) {
    buf = buf.narrow(d, r.offset[size_t(d)], r.extent[size_t(d)]).contiguous().clone();
  });
  OptimizerDecorator::load_state_dict(sd);
}

}  // namespace booster::plugins
