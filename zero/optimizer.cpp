// The ZeRO optimizer leaf (see zero_optimizer.h).
#include "zero/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/dist/runtime.h"
#include "core/kernels/raw.h"

namespace booster::zero {

LowLevelZeroOptimizer::LowLevelZeroOptimizer(std::shared_ptr<optim::Optimizer> optim, std::shared_ptr<Engine> engine,
                                             ZeroStepOptions opts)
    : OptimizerLeaf(std::move(optim)), eng_(std::move(engine)), opts_(opts),
      scaling_(opts.precision, opts.scaler) {
  // A layer-wise optimizer (Lamb, Lars) steps on the chunks with its per-parameter norms summed
  // over each part's group (step_on_shards).
  BOOSTER_CHECK(optim_->elementwise() || optim_->layerwise(), "ZeRO: ", optim_->type_name(),
                " is neither element-wise nor layer-wise: it cannot step on shards");
  if (!optim_->elementwise())
    for (size_t i = 0; i < eng_->layout().parts().size(); ++i)
      BOOSTER_CHECK(!eng_->shards().at(i).offloaded, "ZeRO: ", optim_->type_name(), " with offloaded optimizer states "
                    "(cpu_offload, offload_optim_frac) is not supported: its two passes would read the disk twice");
}

std::vector<std::string> LowLevelZeroOptimizer::part_names() const {
  std::vector<std::string> names;
  for (const Part& p : eng_->layout().parts()) names.push_back(p.name);
  return names;
}

void LowLevelZeroOptimizer::sum_over_group(std::vector<std::vector<double>>& sums) const {
  // sums[i]: part i's partial sums. A split part's chunks are disjoint over its group: each
  // group's parts summed in one all-reduce, the groups in the order of their first part (the
  // same on every rank of a group, so no two ranks wait on each other's next group); a part
  // kept whole (a layerwise plan's DDP layer) has its whole sums already.
  const auto& parts = eng_->layout().parts();
  std::vector<const dist::ProcessGroup*> groups;
  for (const Part& p : parts)
    if (!p.replicated && p.group->size() > 1 && std::find(groups.begin(), groups.end(), p.group) == groups.end())
      groups.push_back(p.group);
  for (const dist::ProcessGroup* g : groups) {
    std::vector<double> flat;
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].group == g && !parts[i].replicated) flat.insert(flat.end(), sums[i].begin(), sums[i].end());
    flat = dist::all_reduce_doubles(std::move(flat), dist::ReduceOp::sum, *g);
    size_t k = 0;
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].group == g && !parts[i].replicated)
        for (double& v : sums[i]) v = flat[k++];
  }
}

void LowLevelZeroOptimizer::backward(const Tensor& loss, bool retain_graph) {
  OptimizerLeaf::backward(scaling_.scale_loss(loss), retain_graph);
}

std::vector<Tensor> LowLevelZeroOptimizer::chunks() const {
  std::vector<Tensor> out;
  for (size_t i = 0; i < eng_->layout().parts().size(); ++i)
    if (Tensor g = eng_->grads().chunk(i); g.defined()) out.push_back(g);
  return out;
}

bool LowLevelZeroOptimizer::nonfinite_anywhere() const {
  bool bad = !kernels::all_finite(chunks());
  for (size_t i = 0; i < eng_->layout().parts().size() && !bad; ++i)  // chunks on disk: noted when written
    bad = eng_->grads().on_disk(i) && eng_->grads().has(i) && !eng_->grads().noted(i).finite;
  // Every rank decides alike (Colossal-AI reduces the flag over the world).
  return dist::world_size() > 1 ? dist::all_reduce_scalar(bad ? 1.0 : 0.0, dist::ReduceOp::max) > 0 : bad;
}

double LowLevelZeroOptimizer::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                        const optim::NormScope& scope) {
  BOOSTER_CHECK(norm_type == 2.0, "LowLevelZeroPlugin: only the 2-norm clips across partitions, got norm_type ",
                norm_type);
  // The chunks are disjoint: their squares summed over the dp group count each element once.
  // Parts on several groups (a layerwise plan) are summed over the world, a part kept whole
  // counted on its group's first rank.
  const auto& dp = eng_->layout().uniform() ? eng_->layout().group() : dist::ProcessGroup::world();
  double on_disk = 0;  // sums of squares noted as disk chunks were written
  for (size_t i = 0; i < eng_->layout().parts().size(); ++i)
    if (eng_->grads().on_disk(i) && eng_->grads().has(i) && scope.count(eng_->layout().parts()[i].param)) on_disk += eng_->grads().noted(i).sum_squares;
  const optim::NormReducer over_dp = [&](double local, bool is_max) {
    local += on_disk;
    const double v = dp.size() > 1 ? dist::all_reduce_scalar(local, is_max ? dist::ReduceOp::max : dist::ReduceOp::sum, dp)
                                   : local;
    return scope.combine(v, is_max);
  };
  std::vector<Tensor> counted;  // a part replicated over an outer group (tensor parallelism) counts once there
  for (size_t i = 0; i < eng_->layout().parts().size(); ++i) {
    const Part& p = eng_->layout().parts()[i];
    if (p.replicated && p.group->rank() != 0) continue;
    if (Tensor g = eng_->grads().chunk(i); g.defined() && scope.count(p.param)) counted.push_back(g);
  }
  const double norm = optim::norm_of(counted, 2.0, over_dp) / scaling_.loss_scale();
  BOOSTER_CHECK(!error_if_nonfinite || std::isfinite(norm), "clip_grad_by_norm: the total norm is ", norm);
  scaling_.set_clip(norm, max_norm);
  return norm;
}

void LowLevelZeroOptimizer::clip_grad_by_value(double clip_value) {
  const double bound = clip_value * scaling_.loss_scale();  // gradients are still scaled
  optim::clamp_values(chunks(), bound);
  for (size_t i = 0; i < eng_->layout().parts().size(); ++i) {
    if (!eng_->grads().on_disk(i) || !eng_->grads().has(i)) continue;  // the ones in RAM are clamped above
    Tensor g = eng_->grads().fetch(i);
    optim::clamp_values({g}, bound);
    eng_->grads().renote(i, g);
    eng_->grads().release(i, true);
  }
}

void LowLevelZeroOptimizer::step() {
  if (!scaling_.begin_step(nonfinite_anywhere())) {
    zero_grad();
    eng_->after_step();
    return;
  }
  if (opts_.max_norm > 0) clip_norm(opts_.max_norm, 2.0, false, {});
  const double div = scaling_.take_divisor();
  NoGradGuard ng;
  auto& parts = eng_->layout().parts();
  std::vector<size_t> todo;  // parts with a chunk here and a gradient
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].n > 0 && eng_->grads().has(i)) todo.push_back(i);
  // Without masters the chunk of the working parameter is updated through an fp32 copy.
  auto value_of = [&](size_t i) {
    return eng_->shards().has_masters() ? eng_->shards().master(i) : eng_->shards().own_slice(i).to(DType::f32).contiguous().clone();
  };
  std::vector<size_t> ram, disk;  // by where the part's master and state live
  for (size_t i : todo) (eng_->shards().at(i).offloaded ? disk : ram).push_back(i);
  BOOSTER_CHECK(optim_->elementwise() || disk.empty(), "ZeRO: ", optim_->type_name(), "'s states moved to the disk tier ",
                "(Gemini's auto placement under a cap?): its two passes over a chunk need them in RAM");
  {
    // Unscaling, clipping and the refresh of this rank's slice of the working parameter
    // happen inside the update.
    std::vector<optim::UpdateTarget> targets;
    for (size_t i : ram) targets.push_back({parts[i].name, value_of(i), eng_->grads().chunk(i), eng_->shards().own_slice(i)});
    if (!optim_->elementwise())  // every rank takes part, with or without chunks (the sums are collective)
      optim_->step_on_shards(targets, div, part_names(), [this](auto& sums) { sum_over_group(sums); });
    else if (!targets.empty())
      optim_->step_on(targets, div);
    for (size_t i : ram) eng_->shards().release_own(i, true);
  }
  for (size_t k = 0; k < disk.size(); ++k) {  // one parameter in RAM at a time, the next read ahead
    const size_t i = disk[k];
    if (k + 1 < disk.size()) {
      eng_->shards().prefetch_master(disk[k + 1]);
      eng_->shards().prefetch_own(disk[k + 1]);
      prefetch_state(disk[k + 1]);
      eng_->grads().prefetch(disk[k + 1]);
    }
    install_state(i);
    optim_->step_on({{parts[i].name, value_of(i), eng_->grads().fetch(i), eng_->shards().own_slice(i)}}, div);
    eng_->grads().release(i, false);
    stash_state(i);
    eng_->shards().release_own(i, true);
    eng_->shards().release_master(i, true);
  }
  eng_->gatherer().gather(opts_.overlap_allgather);
  scaling_.end_step();
  eng_->after_step();
}

const std::map<std::string, int64_t>& LowLevelZeroOptimizer::state_slots(size_t i) const {
  static const std::map<std::string, int64_t> none;
  auto it = state_slots_.find(eng_->layout().parts().at(i).name);
  return it == state_slots_.end() ? none : it->second;
}

void LowLevelZeroOptimizer::prefetch_state(size_t i) {
  for (auto& [k, id] : state_slots_[eng_->layout().parts()[i].name]) eng_->shards().store()->prefetch(id);
}

void LowLevelZeroOptimizer::install_state(size_t i) {
  const std::string& name = eng_->layout().parts()[i].name;
  for (auto& [k, id] : state_slots_[name]) optim_->state()[name].buffers[k] = eng_->shards().store()->get(id);
}

void LowLevelZeroOptimizer::stash_state(size_t i) {
  const std::string& name = eng_->layout().parts()[i].name;
  auto it = optim_->state().find(name);
  if (it == optim_->state().end()) return;
  auto& slots = state_slots_[name];
  for (auto& [k, t] : it->second.buffers) {
    auto s = slots.find(k);
    if (s == slots.end()) {
      slots[k] = eng_->shards().store()->put(t, eng_->shards().at(i).resident);  // state created by this step: into the store
      continue;
    }
    Tensor ram = eng_->shards().store()->get(s->second);
    if (!ram.is_same(t)) ram.copy_(t);
    eng_->shards().store()->release(s->second, true);
  }
  it->second.buffers.clear();  // RAM keeps the step count only
}

std::vector<StateLayout> LowLevelZeroOptimizer::state_layout() const {
  std::vector<StateLayout> out;
  for (auto& p : eng_->layout().parts())
    if (p.n > 0) out.push_back({p.name, {p.n}, p.region});
  return out;
}

optim::OptimizerStateDict LowLevelZeroOptimizer::local_state_dict() const {
  CheckpointShare share = local_checkpoint_state();
  for (const StateTensor& st : share.on_disk) {  // the whole state in RAM, as a state dict holds it
    const size_t slash = st.name.rfind('/');
    share.dict.state[st.name.substr(0, slash)].buffers[st.name.substr(slash + 1)] = HeldState(st).data().clone();
  }
  return share.dict;
}

OptimizerWrapper::CheckpointShare LowLevelZeroOptimizer::local_checkpoint_state() const {
  CheckpointShare out{optim_->state_dict(), {}};
  scaling_.save(out.dict.extra);
  for (auto& p : eng_->layout().parts()) {
    auto it = state_slots_.find(p.name);
    if (it == state_slots_.end()) continue;
    for (auto& [k, id] : it->second)
      out.on_disk.push_back({p.name + "/" + k, Tensor(), p.region, store_source(eng_->shards().shared_store(), id)});
  }
  return out;
}

ShardedState LowLevelZeroOptimizer::local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) {
  ShardedState out;
  OffloadStore* store = eng_->shards().store();
  if (!store) return out;
  for (size_t i = 0; i < eng_->layout().size(); ++i) {
    const Part& p = eng_->layout().parts()[i];
    const Shard& s = eng_->shards().at(i);
    auto k = keys.find(p.name);
    if (!s.offloaded || p.n == 0 || k == keys.end()) continue;
    auto& slots = state_slots_[p.name];
    for (auto& key : k->second) {
      auto [it, fresh] = slots.try_emplace(key, -1);
      // A new slot: a resident part's stays in RAM (pinned), another's is filled on disk.
      if (fresh) it->second = s.resident ? store->put(Tensor::zeros({p.n}), true) : store->reserve({p.n}, DType::f32);
      out.push_back({p.name + "/" + key, Tensor(), p.region, store_source(eng_->shards().shared_store(), it->second)});
    }
  }
  return out;
}

void LowLevelZeroOptimizer::load_local_state_dict(const optim::OptimizerStateDict& sd) {
  std::map<std::string, Shape> shapes;
  for (auto& p : eng_->layout().parts()) shapes[p.name] = {p.n};
  optim_->load_state_dict(sd, shapes);
  scaling_.load(sd.extra);
  for (size_t i = 0; i < eng_->layout().parts().size(); ++i)
    if (eng_->shards().at(i).offloaded) stash_state(i);
}

optim::OptimizerStateDict LowLevelZeroOptimizer::state_dict() const {
  const optim::OptimizerStateDict local = local_state_dict();
  const auto& dp = eng_->layout().uniform() ? eng_->layout().group() : dist::ProcessGroup::world();
  // Which states each parameter has (a rank without a chunk of it has none): over all ranks.
  std::ostringstream mine;
  for (auto& [name, st] : local.state) {
    mine << name << ' ' << st.step;
    for (auto& [k, t] : st.buffers) mine << ' ' << k;
    mine << '\n';
  }
  std::map<std::string, std::pair<int64_t, std::set<std::string>>> known;
  for (auto& text : dp.size() > 1 ? dist::all_gather_bytes(mine.str(), dp) : std::vector<std::string>{mine.str()}) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      std::istringstream ls(line);
      std::string name, key;
      int64_t step = 0;
      ls >> name >> step;
      auto& k = known[name];
      k.first = std::max(k.first, step);
      while (ls >> key) k.second.insert(key);
    }
  }
  optim::OptimizerStateDict full{local.type, local.param_groups, {}, local.extra};
  NoGradGuard ng;
  for (auto& p : eng_->layout().parts()) {  // every rank walks the parts in the same order
    auto it = known.find(p.name);
    if (it == known.end()) continue;
    optim::ParamState st{it->second.first, {}};
    for (auto& k : it->second.second) {
      auto mine_k = local.state.find(p.name);
      if (p.replicated) {  // whole on every rank of its group
        if (mine_k != local.state.end() && mine_k->second.buffers.count(k))
          st.buffers[k] = mine_k->second.buffers.at(k).view(p.shape).clone();
        continue;
      }
      const auto& group = *p.group;
      Tensor send = Tensor::zeros({p.chunk});
      auto mine_st = local.state.find(p.name);
      if (mine_st != local.state.end() && mine_st->second.buffers.count(k) && p.n > 0)
        send.narrow(0, 0, p.n).copy_(mine_st->second.buffers.at(k).view({-1}));
      Tensor recv = Tensor::empty({group.size() * p.chunk});
      dist::all_gather(recv, send, group);
      st.buffers[k] = recv.narrow(0, 0, p.numel).contiguous().view(p.shape);
    }
    full.state[p.name] = std::move(st);
  }
  return full;
}

void LowLevelZeroOptimizer::load_state_dict(const optim::OptimizerStateDict& sd) {
  optim::OptimizerStateDict local{sd.type, sd.param_groups, {}, sd.extra};
  for (auto& p : eng_->layout().parts()) {
    auto it = sd.state.find(p.name);
    if (it == sd.state.end() || p.n == 0) continue;
    optim::ParamState st{it->second.step, {}};
    for (auto& [k, t] : it->second.buffers) {
      BOOSTER_CHECK_T(ShapeError, t.numel() == p.numel, "load_state_dict: state '", k, "' of '", p.name, "' has ",
                      t.numel(), " elements, the parameter ", p.numel);
      st.buffers[k] = t.detach().contiguous().view({-1}).narrow(0, p.lo, p.n).to(DType::f32).contiguous().clone();
    }
    local.state[p.name] = std::move(st);
  }
  load_local_state_dict(local);
}

}  // namespace booster::zero
