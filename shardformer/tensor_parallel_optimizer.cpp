// HybridParallelOptimizer (see tensor_parallel_optimizer.h).
#include "shardformer/tensor_parallel_optimizer.h"

#include <set>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/functional.h"

namespace booster::shardformer {

namespace {
// True when p is a block of its logical tensor (a tensor-parallel shard), not all of it.
bool is_block(const Tensor& p) {
  const Region* r = p.region();
  return r && r->box_numel() != shape_numel(r->full);
}
// Calls f(state tensor, its parameter, its region) for every optimizer state tensor of a
// tensor-parallel block in `sd` (those shaped like the parameter, or like the logical
// tensor when `logical`).
template <typename F>
void for_each_shard_state(OptimizerWrapper& o, optim::OptimizerStateDict& sd, bool logical, F&& f) {
  for (auto& g : o.param_groups())
    for (auto& [name, p] : g.params) {
      auto it = sd.state.find(name);
      if (!is_block(p) || it == sd.state.end()) continue;
      for (auto& [k, buf] : it->second.buffers)
        if (buf.shape() == (logical ? p.region()->full : p.shape())) f(buf, p, *p.region());
    }
}

// The logical tensor assembled from every rank's block of it (blocks of any extent, e.g. a
// padded vocabulary's last shard, and of a framed box; ranks holding the same block agree).
// Collective over g.
Tensor gather_blocks(const Tensor& local, const Region& r, const dist::ProcessGroup& g) {
  const int n = g.size();
  const Shape& frame = r.coords();
  const size_t nd = frame.size();
  std::vector<int64_t> corner(r.offset.begin(), r.offset.end());
  corner.insert(corner.end(), r.extent.begin(), r.extent.end());
  Tensor mine = Tensor::from_ints(corner, {int64_t(2 * nd)}), all = Tensor::empty({n * int64_t(2 * nd)}, DType::i64);
  dist::all_gather(all, mine, g);
  const int64_t* c = all.data<int64_t>();
  int64_t most = 0;
  for (int k = 0; k < n; ++k) most = std::max(most, shape_numel(Shape(c + k * int64_t(2 * nd) + int64_t(nd), c + (k + 1) * int64_t(2 * nd))));
  Tensor padded = Tensor::zeros({most}, local.dtype());
  padded.narrow(0, 0, local.numel()).copy_(local.contiguous().reshape({local.numel()}));
  Tensor data = Tensor::empty({n * most}, local.dtype());
  dist::all_gather(data, padded, g);
  Tensor full = Tensor::zeros(frame, local.dtype());
  for (int k = 0; k < n; ++k) {
    Tensor dst = full;
    const Shape extent(c + k * int64_t(2 * nd) + int64_t(nd), c + (k + 1) * int64_t(2 * nd));
    for (size_t d = 0; d < nd; ++d) dst = dst.narrow(int64_t(d), c[k * int64_t(2 * nd) + int64_t(d)], extent[d]);
    dst.copy_(data.narrow(0, k * most, shape_numel(extent)).view(extent));
  }
  return full.reshape(r.full);
}

// The parameters of o whose block this rank is the first (lowest tp rank) to hold: a block's
// holders are the ranks whose block starts at the same corner. Collective over tp.
std::shared_ptr<std::set<const void*>> first_holders(OptimizerWrapper& o, const dist::ProcessGroup& tp) {
  std::vector<const void*> ps;
  std::vector<int64_t> keys;
  for (auto& g : o.param_groups())
    for (auto& [name, p] : g.params) {
      int64_t key = -1;  // a whole parameter: the same on every rank
      if (const Region* r = p.region()) {
        key = 0;
        for (size_t d = 0; d < r->coords().size(); ++d) key = key * r->coords()[d] + r->offset[d];
      }
      ps.push_back(p.impl());
      keys.push_back(key);
    }
  const int64_t n = int64_t(keys.size());
  Tensor all = Tensor::empty({tp.size() * std::max<int64_t>(n, 1)}, DType::i64);
  Tensor mine = Tensor::from_ints(n ? keys : std::vector<int64_t>{0}, {std::max<int64_t>(n, 1)});
  dist::all_gather(all, mine, tp);
  auto first = std::make_shared<std::set<const void*>>();
  for (int64_t i = 0; i < n; ++i) {
    bool earlier = false;
    for (int r = 0; r < tp.rank() && !earlier; ++r) earlier = all.data<int64_t>()[r * std::max<int64_t>(n, 1) + i] == keys[size_t(i)];
    if (!earlier) first->insert(ps[size_t(i)]);
  }
  return first;
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

HybridParallelOptimizer::HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner,
                                                 std::shared_ptr<dist::ProcessGroupMesh> mesh, double max_norm,
                                                 bool replicated_blocks)
    : OptimizerDecorator(std::move(inner)), mesh_(std::move(mesh)), groups_(mesh_groups(mesh_)), max_norm_(max_norm) {
  if (replicated_blocks) {
    auto first = first_holders(*this->inner(), mesh_->group("tp"));
    groups_.counted = [first](const Tensor& p) { return first->count(p.impl()) > 0; };
  }
  install_shard_sums();
}

HybridParallelOptimizer::HybridParallelOptimizer(std::shared_ptr<OptimizerWrapper> inner, TensorParallelGroups groups,
                                                 double max_norm)
    : OptimizerDecorator(std::move(inner)), groups_(std::move(groups)), max_norm_(max_norm) {
  install_shard_sums();
}

void HybridParallelOptimizer::count_elsewhere(const std::vector<Tensor>& params) {
  if (params.empty()) return;
  auto skip = std::make_shared<std::set<const void*>>();
  for (const Tensor& p : params) skip->insert(p.impl());
  auto counted = groups_.counted;
  auto tp_of = groups_.tp_of;
  groups_.counted = [skip, counted, tp_of](const Tensor& p) {
    if (skip->count(p.impl())) return false;
    if (counted) return counted(p);
    const dist::ProcessGroup* tp = tp_of(p);
    return is_block(p) || !tp || tp->rank() == 0;
  };
}

void HybridParallelOptimizer::install_shard_sums() {
  auto base = inner()->unwrap();
  if (!base || groups_.trivial) return;
  struct Held {
    const dist::ProcessGroup* tp;
    bool counted;
  };
  auto held = std::make_shared<std::map<std::string, Held>>();
  for (auto& g : inner()->param_groups())
    for (auto& [name, p] : g.params) {
      const dist::ProcessGroup* tp = groups_.tp_of(p);
      if (!is_block(p) || !tp || tp->size() == 1) continue;
      (*held)[name] = {tp, groups_.counted ? groups_.counted(p) : true};
    }
  if (held->empty()) return;
  base->set_shard_sums([held](const std::string& name, std::vector<double>& sums) {
    auto it = held->find(name);
    if (it == held->end()) return;
    for (double& v : sums) v = dist::all_reduce_scalar(it->second.counted ? v : 0.0, dist::ReduceOp::sum, *it->second.tp);
  });
}

double HybridParallelOptimizer::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                          const optim::NormScope& outer) {
  if (groups_.trivial) return OptimizerDecorator::clip_norm(max_norm, norm_type, error_if_nonfinite, outer);
  optim::NormScope scope;
  scope.reduce = [this, outer](double local, bool is_max) { return outer.combine(groups_.reduce(local, is_max), is_max); };
  // A shard is this rank's own; a replicated parameter is the same on every rank of its tp group.
  scope.counts = [this, outer](const Tensor& p) {
    if (groups_.counted) return groups_.counted(p) && outer.count(p);
    const dist::ProcessGroup* tp = groups_.tp_of(p);
    return (is_block(p) || !tp || tp->rank() == 0) && outer.count(p);
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
  for_each_shard_state(*inner(), sd, false, [&](Tensor& buf, const Tensor& p, const Region& r) {
    const dist::ProcessGroup* tp = groups_.tp_of(p);
    BOOSTER_CHECK(tp != nullptr, "HybridParallelOptimizer: a tensor-parallel shard without a tensor-parallel group");
    buf = gather_blocks(buf, r, *tp);
  });
  return sd;
}

void HybridParallelOptimizer::load_state_dict(const optim::OptimizerStateDict& full) {
  optim::OptimizerStateDict sd = full;
  NoGradGuard ng;
  for_each_shard_state(*inner(), sd, true, [](Tensor& buf, const Tensor&, const Region& r) {
    buf = buf.reshape(r.coords());
    for (size_t d = 0; d < r.coords().size(); ++d) buf = buf.narrow(int64_t(d), r.offset[d], r.extent[d]);
    buf = buf.contiguous().reshape(r.local_shape()).clone();
  });
  OptimizerDecorator::load_state_dict(sd);
}

}  // namespace booster::shardformer
