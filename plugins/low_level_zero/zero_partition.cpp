// ZeRO partition, masters and the parameter all-gather (see zero_partition.h).
#include "plugins/low_level_zero/zero_partition.h"

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/common/profiler.h"

#include <map>

namespace booster::plugins {

ZeroPartition::ZeroPartition(const optim::NamedParams& params, const dist::ProcessGroup& dp, DType working,
                             bool master_weights, double bucket_elems, std::shared_ptr<OffloadStore> store,
                             double offload_frac)
    : dp_(dp), working_(working), master_weights_(master_weights), store_(std::move(store)) {
  NoGradGuard ng;
  const int n = dp.size(), r = dp.rank();
  double total = 0, offloaded = 0;
  for (auto& [name, p] : params)
    if (p.requires_grad() && is_floating(p.dtype())) total += double(p.numel());
  for (auto& [name, p] : params) {
    if (!p.requires_grad() || !is_floating(p.dtype())) continue;
    Tensor param = p;
    Part part;
    part.name = name;
    part.param = param;
    part.shape = param.shape();
    part.numel = param.numel();
    part.chunk = (part.numel + n - 1) / n;
    part.lo = std::min(part.numel, part.chunk * r);
    part.n = std::min(part.numel, part.lo + part.chunk) - part.lo;
    const Region whole = param.region() ? *param.region() : Region::whole(param.shape());
    part.region = whole.sub_range(part.lo, part.n);
    part.offloaded = store_ && offloaded < offload_frac * total - 0.5;
    if (part.offloaded) offloaded += double(part.numel);
    if (master_weights_) {
      Tensor m = param.detach().contiguous().view({-1}).narrow(0, part.lo, part.n).to(DType::f32).contiguous().clone();
      if (part.offloaded) part.master_slot = store_->put(m);
      else part.master = m;
    }
    if (param.dtype() != working) param.set_data(param.detach().to(working).contiguous());  // same handle
    parts_.push_back(std::move(part));
  }
  std::vector<size_t> backward(parts_.size());
  for (size_t k = 0; k < backward.size(); ++k) backward[k] = backward.size() - 1 - k;
  set_buckets(pack_buckets(backward, bucket_elems));
}

std::vector<std::vector<size_t>> ZeroPartition::pack_buckets(const std::vector<size_t>& order, double bucket_elems) const {
  // The first is capped at 2^18 elements (PyTorch's DDP caps it at 1 MB) so communication
  // starts early and overlaps the rest of backward even when the model is one default bucket.
  BOOSTER_CHECK(order.size() == parts_.size(), "ZeroPartition.pack_buckets: ", order.size(), " parts ordered, the partition has ",
                parts_.size());
  std::vector<std::vector<size_t>> buckets;
  double in_bucket = 0;
  for (size_t k : order) {
    const double cap = buckets.size() <= 1 ? std::min(bucket_elems, double(1 << 18)) : bucket_elems;
    if (buckets.empty() || (in_bucket > 0 && in_bucket + double(parts_.at(k).numel) > cap)) {
      buckets.emplace_back();
      in_bucket = 0;
    }
    buckets.back().push_back(k);
    in_bucket += double(parts_[k].numel);
  }
  return buckets;
}

void ZeroPartition::set_buckets(std::vector<std::vector<size_t>> buckets) {
  std::vector<int> seen(parts_.size(), 0);
  for (auto& b : buckets)
    for (size_t i : b) ++seen.at(i);
  BOOSTER_CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }),
                "ZeroPartition: every part must be in exactly one bucket");
  buckets_ = std::move(buckets);
  bucket_of_.assign(parts_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of_[i] = b;
  fetched_.assign(buckets_.size(), false);
}

void ZeroPartition::rebucket(std::vector<std::vector<size_t>> buckets) {
  NoGradGuard ng;
  wait_gather();
  for (auto& [b, pend] : prefetched_) pend.work->wait();
  prefetched_.clear();
  for (size_t b = 0; b < buckets_.size(); ++b) release(b);
  set_buckets(std::move(buckets));
  // A bucket holding a sharded part is sharded: the others give up their full parameter
  // (no communication; a part never goes back to whole).
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (std::any_of(buckets_[b].begin(), buckets_[b].end(), [&](size_t i) { return part_sharded(i); })) shard_bucket(b);
}

void ZeroPartition::shard_bucket(size_t b) {
  NoGradGuard ng;
  wait_gather();
  bool changed = false;
  for (size_t i : buckets_.at(b))
    if (!part_sharded(i)) parts_[i].own = own_slice(i).contiguous().clone(), changed = true;
  if (!changed) return;
  fetched_[b] = true;
  release(b);
}

void ZeroPartition::prefetch(size_t b) {
  if (is_fetched(b) || prefetched_.count(b)) return;
  prefetched_[b] = start_gather(buckets_.at(b));
}

void ZeroPartition::fetch(size_t b) {
  if (is_fetched(b)) return;
  ProfileScope prof_("gemini chunk fetch");
  NoGradGuard ng;
  prefetch(b);
  Pending pend = std::move(prefetched_.at(b));
  prefetched_.erase(b);
  finish_gather(pend, /*fresh=*/true);
  fetched_[b] = true;
}

void ZeroPartition::release(size_t b) {
  if (!is_sharded(b) || !fetched_.at(b)) return;
  for (size_t i : buckets_[b]) parts_[i].param.set_data(Tensor::empty({0}, working_));
  fetched_[b] = false;
}

size_t ZeroPartition::full_bytes() const {
  size_t n = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (is_fetched(b))
      for (size_t i : buckets_[b]) n += size_t(parts_[i].numel) * dtype_size(working_);
  return n;
}

Tensor ZeroPartition::master(size_t i) {
  Part& p = parts_.at(i);
  return p.master_slot >= 0 ? store_->get(p.master_slot) : p.master;
}

void ZeroPartition::release_master(size_t i, bool dirty) {
  if (parts_.at(i).master_slot >= 0) store_->release(parts_[i].master_slot, dirty);
}

void ZeroPartition::prefetch_master(size_t i) {
  if (parts_.at(i).master_slot >= 0) store_->prefetch(parts_[i].master_slot);
}

ZeroPartition::Pending ZeroPartition::start_gather(const std::vector<size_t>& bucket) const {
  NoGradGuard ng;
  Tensor send = pack_own(bucket);
  Pending pend{bucket, Tensor::empty({dp_.size() * send.numel()}, working_), nullptr, send};
  pend.work = dist::all_gather(pend.recv, send, dp_, /*async_op=*/true);
  return pend;
}

void ZeroPartition::finish_gather(Pending& pend, bool fresh) {
  NoGradGuard ng;
  pend.work->wait();
  int64_t width = 0;
  for (size_t i : pend.parts) width += parts_[i].chunk;
  int64_t off = 0;
  for (size_t i : pend.parts) {
    Part& p = parts_[i];
    Tensor flat = fresh ? Tensor::empty({p.numel}, working_) : p.param.detach().view({-1});
    for (int r = 0; r < dp_.size(); ++r) {
      const int64_t lo = std::min(p.numel, p.chunk * r), hi = std::min(p.numel, lo + p.chunk);
      if (hi > lo) flat.narrow(0, lo, hi - lo).copy_(pend.recv.narrow(0, r * width + off, hi - lo));
    }
    if (fresh) p.param.set_data(flat.view(p.shape));  // same handle: autograd and the optimizer keep it
    off += p.chunk;
  }
}

Tensor ZeroPartition::pack_own(const std::vector<size_t>& bucket) const {
  int64_t width = 0;
  for (size_t i : bucket) width += parts_[i].chunk;
  Tensor send = Tensor::zeros({width}, working_);
  int64_t off = 0;
  for (size_t i : bucket) {
    if (parts_[i].n > 0) {
      send.narrow(0, off, parts_[i].n).copy_(own_slice(i));
      release_own(i, false);
    }
    off += parts_[i].chunk;
  }
  return send;
}

void ZeroPartition::offload_own(size_t b) {
  BOOSTER_CHECK(is_sharded(b) && store_, "ZeroPartition.offload_own: bucket ", b, " is not sharded or there is no store");
  NoGradGuard ng;
  for (size_t i : buckets_[b]) {
    Part& p = parts_[i];
    if (p.own_slot >= 0 || p.n == 0) continue;
    p.own_slot = store_->put(p.own);
    p.own = Tensor();
  }
}

void ZeroPartition::release_own(size_t i, bool dirty) const {
  if (parts_.at(i).own_slot >= 0) store_->release(parts_[i].own_slot, dirty);
}

void ZeroPartition::prefetch_own(size_t i) const {
  if (parts_.at(i).own_slot >= 0) store_->prefetch(parts_[i].own_slot);
}

void ZeroPartition::prefetch_own_bucket(size_t b) const {
  for (size_t i : buckets_.at(b)) prefetch_own(i);
}

Tensor ZeroPartition::own_slice(size_t i) const {
  const Part& p = parts_.at(i);
  if (p.own_slot >= 0) return store_->get(p.own_slot);
  if (p.own.defined()) return p.own;
  return p.param.detach().view({-1}).narrow(0, p.lo, p.n);
}

void ZeroPartition::gather(bool async) {
  ProfileScope prof_("zero all-gather");
  NoGradGuard ng;
  wait_gather();
  // Prefetches still in flight carry the slices from before the step: finish and drop them.
  for (auto& [b, pend] : prefetched_) pend.work->wait();
  prefetched_.clear();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    if (is_sharded(bi)) {  // fetched when used; a copy still fetched is stale now
      release(bi);
      continue;
    }
    pending_.push_back(start_gather(buckets_[bi]));
  }
  if (!async) wait_gather();
}

void ZeroPartition::refresh_working() {
  NoGradGuard ng;
  wait_gather();
  if (master_weights_)
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (parts_[i].n == 0) continue;
      Tensor own = own_slice(i);
      own.copy_(master(i));
      release_own(i, true);
      release_master(i, false);
    }
  gather(false);
}

void ZeroPartition::wait_gather() {
  if (pending_.empty()) return;
  ProfileScope prof_("zero all-gather wait");
  NoGradGuard ng;
  for (auto& pend : pending_) finish_gather(pend, /*fresh=*/false);
  pending_.clear();
}

std::shared_ptr<const StateTensor::Source> store_source(std::shared_ptr<OffloadStore> store, int64_t id) {
  return std::make_shared<StateTensor::Source>(StateTensor::Source{
      store->slot_dtype(id), store->slot_shape(id), [store, id] { return store->get(id); },
      [store, id] { store->release(id, false); },
      [store, id](const Tensor& t) { store->assign(id, t, /*owned=*/true); }});
}

ShardedState ZeroPartition::substitute(ShardedState state) {
  wait_gather();
  if (!master_weights_) return state;
  std::map<std::string, size_t> part_of;
  for (size_t i = 0; i < parts_.size(); ++i) part_of[parts_[i].name] = i;
  ShardedState out;
  for (auto& st : state) {
    auto it = part_of.find(st.name);
    if (it == part_of.end()) {
      out.push_back(std::move(st));  // a buffer or frozen parameter: whole
      continue;
    }
    const Part& p = parts_[it->second];
    if (p.n == 0) continue;  // a rank without a chunk holds nothing
    if (p.master_slot < 0) {
      out.push_back({p.name, p.master, p.region, nullptr});
      continue;
    }
    out.push_back({p.name, Tensor(), p.region, store_source(store_, p.master_slot)});  // read as it is written
  }
  return out;
}

void ZeroPartition::after_load() { refresh_working(); }  // offloaded masters went back to the store as loaded

}  // namespace booster::plugins

