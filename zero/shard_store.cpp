// The ZeRO shard store (see shard_store.h).
#include "zero/shard_store.h"

#include <map>

#include "core/autograd/grad_mode.h"
#include "core/tensor/lazy.h"

namespace booster::zero {

ShardStore::ShardStore(Layout& layout, DType working, bool master_weights, std::shared_ptr<OffloadStore> store,
                       double offload_frac)
    : layout_(layout), working_(working), master_weights_(master_weights), store_(std::move(store)) {
  NoGradGuard ng;
  double total = 0, offloaded = 0;
  for (auto& p : layout_.parts()) total += double(p.numel);
  shards_.resize(layout_.size());
  for (size_t i = 0; i < layout_.size(); ++i) {
    Part& p = layout_.parts()[i];
    Shard& s = shards_[i];
    s.offloaded = store_ && offloaded < offload_frac * total - 0.5;
    if (s.offloaded) offloaded += double(p.numel);
    if (master_weights_) {
      // A lazy parameter (nn::LazyInit) makes this rank's elements alone.
      Tensor m = is_lazy(p.param) ? region_values(p.param, p.region, DType::f32).view({-1})
                                  : p.param.detach().contiguous().view({-1}).narrow(0, p.lo, p.n).to(DType::f32).contiguous().clone();
      if (s.offloaded) s.master_slot = store_->put(m);
      else s.master = m;
    }
    if (p.param.dtype() == working) continue;
    if (is_lazy(p.param)) lazy_cast(p.param, working);  // materialized whole later, or only its slice when sharded
    else p.param.set_data(p.param.detach().to(working).contiguous());  // same handle
  }
}

Tensor ShardStore::master(size_t i) {
  const Shard& s = shards_.at(i);
  return s.master_slot >= 0 ? store_->get(s.master_slot) : s.master;
}

void ShardStore::release_master(size_t i, bool dirty) {
  if (shards_.at(i).master_slot >= 0) store_->release(shards_[i].master_slot, dirty);
}

void ShardStore::prefetch_master(size_t i) {
  if (shards_.at(i).master_slot >= 0) store_->prefetch(shards_[i].master_slot);
}

Tensor ShardStore::own_slice(size_t i) const {
  const Shard& s = shards_.at(i);
  if (s.own_slot >= 0) return store_->get(s.own_slot);
  if (s.own.defined()) return s.own;
  const Part& p = layout_.parts()[i];
  if (is_lazy(p.param)) return region_values(p.param, p.region, working_).view({-1});  // a copy: keep_own takes it
  return p.param.detach().view({-1}).narrow(0, p.lo, p.n);
}

void ShardStore::release_own(size_t i, bool dirty) const {
  if (shards_.at(i).own_slot >= 0) store_->release(shards_[i].own_slot, dirty);
}

void ShardStore::prefetch_own(size_t i) const {
  if (shards_.at(i).own_slot >= 0) store_->prefetch(shards_[i].own_slot);
}

void ShardStore::keep_own(size_t i) {
  if (sharded(i)) return;
  const Part& p = layout_.parts()[i];
  shards_[i].own = is_lazy(p.param) ? own_slice(i) : own_slice(i).contiguous().clone();
}

void ShardStore::offload_own(size_t i) {
  BOOSTER_CHECK(store_ != nullptr, "ZeRO shard store: part '", layout_.parts().at(i).name,
                "' cannot move to the disk tier: there is none");
  Shard& s = shards_.at(i);
  if (s.own_slot >= 0 || layout_.parts()[i].n == 0 || !s.own.defined()) return;
  s.own_slot = store_->put(s.own);
  s.own = Tensor();
}

void ShardStore::masters_to_own() {
  if (!master_weights_) return;
  NoGradGuard ng;
  for (size_t i = 0; i < layout_.size(); ++i) {
    if (layout_.parts()[i].n == 0) continue;
    Tensor own = own_slice(i);
    own.copy_(master(i));
    release_own(i, true);
    release_master(i, false);
  }
}

std::shared_ptr<const StateTensor::Source> store_source(std::shared_ptr<OffloadStore> store, int64_t id) {
  return std::make_shared<StateTensor::Source>(StateTensor::Source{
      store->slot_dtype(id), store->slot_shape(id), [store, id] { return store->get(id); },
      [store, id] { store->release(id, false); },
      [store, id](const Tensor& t) { store->assign(id, t, /*owned=*/true); }});
}

ShardedState ShardStore::substitute(ShardedState state) const {
  if (!master_weights_) return state;
  std::map<std::string, size_t> part_of;
  for (size_t i = 0; i < layout_.size(); ++i) part_of[layout_.parts()[i].name] = i;
  ShardedState out;
  for (auto& st : state) {
    auto it = part_of.find(st.name);
    if (it == part_of.end()) {
      out.push_back(std::move(st));  // a buffer or frozen parameter: whole
      continue;
    }
    const Part& p = layout_.parts()[it->second];
    const Shard& s = shards_[it->second];
    if (p.n == 0) continue;  // a rank without a chunk holds nothing
    if (s.master_slot < 0) out.push_back({p.name, s.master, p.region, nullptr});
    else out.push_back({p.name, Tensor(), p.region, store_source(store_, s.master_slot)});  // read as it is written
  }
  return out;
}

}  // namespace booster::zero
