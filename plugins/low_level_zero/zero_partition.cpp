// ZeRO partition, masters and the parameter all-gather (see zero_partition.h).
#include "plugins/low_level_zero/zero_partition.h"

#include "core/autograd/grad_mode.h"
#include "core/common/profiler.h"

#include <map>

namespace booster::plugins {

ZeroPartition::ZeroPartition(const optim::NamedParams& params, const dist::ProcessGroup& dp, DType working,
                             bool master_weights, double bucket_elems, std::shared_ptr<OffloadStore> store)
    : dp_(dp), working_(working), master_weights_(master_weights), store_(std::move(store)) {
  NoGradGuard ng;
  const int n = dp.size(), r = dp.rank();
  for (auto& [name, p] : params) {
    if (!p.requires_grad() || !is_floating(p.dtype())) continue;
    Tensor param = p;
    Part part;
    part.name = name;
    part.param = param;
    part.numel = param.numel();
    part.chunk = (part.numel + n - 1) / n;
    part.lo = std::min(part.numel, part.chunk * r);
    part.n = std::min(part.numel, part.lo + part.chunk) - part.lo;
    const Region whole = param.region() ? *param.region() : Region::whole(param.shape());
    part.region = whole.sub_range(part.lo, part.n);
    if (master_weights_) {
      Tensor m = param.detach().contiguous().view({-1}).narrow(0, part.lo, part.n).to(DType::f32).contiguous().clone();
      if (store_) part.master_slot = store_->put(m);
      else part.master = m;
    }
    if (param.dtype() != working) param.set_data(param.detach().to(working).contiguous());  // same handle
    parts_.push_back(std::move(part));
  }
  // Buckets, last parameters first: backward finishes them in that order. The first is
  // capped at 2^18 elements (PyTorch's DDP caps it at 1 MB) so communication starts early
  // and overlaps the rest of backward even when the model is one default bucket.
  double in_bucket = 0;
  for (size_t k = parts_.size(); k-- > 0;) {
    const double cap = buckets_.size() <= 1 ? std::min(bucket_elems, double(1 << 18)) : bucket_elems;
    if (buckets_.empty() || (in_bucket > 0 && in_bucket + double(parts_[k].numel) > cap)) {
      buckets_.emplace_back();
      in_bucket = 0;
    }
    buckets_.back().push_back(k);
    in_bucket += double(parts_[k].numel);
  }
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

Tensor ZeroPartition::own_slice(size_t i) const {
  const Part& p = parts_.at(i);
  return p.param.detach().view({-1}).narrow(0, p.lo, p.n);
}

void ZeroPartition::gather(bool async) {
  ProfileScope prof_("zero all-gather");
  NoGradGuard ng;
  wait_gather();
  for (auto& bucket : buckets_) {
    int64_t b = 0;
    for (size_t i : bucket) b += parts_[i].chunk;
    Tensor send = Tensor::zeros({b}, working_);
    int64_t off = 0;
    for (size_t i : bucket) {
      if (parts_[i].n > 0) send.narrow(0, off, parts_[i].n).copy_(own_slice(i));
      off += parts_[i].chunk;
    }
    Pending pend{bucket, Tensor::empty({dp_.size() * b}, working_), nullptr};
    pend.work = dist::all_gather(pend.recv, send, dp_, true);
    pending_.push_back(std::move(pend));
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
      release_master(i, false);
    }
  gather(false);
}

void ZeroPartition::wait_gather() {
  if (pending_.empty()) return;
  ProfileScope prof_("zero all-gather wait");
  NoGradGuard ng;
  for (auto& pend : pending_) {
    pend.work->wait();
    int64_t b = 0;
    for (size_t i : pend.parts) b += parts_[i].chunk;
    int64_t off = 0;
    for (size_t i : pend.parts) {
      const Part& p = parts_[i];
      Tensor flat = p.param.detach().view({-1});
      for (int r = 0; r < dp_.size(); ++r) {
        const int64_t lo = std::min(p.numel, p.chunk * r), hi = std::min(p.numel, lo + p.chunk);
        if (hi > lo) flat.narrow(0, lo, hi - lo).copy_(pend.recv.narrow(0, r * b + off, hi - lo));
      }
      off += p.chunk;
    }
  }
  pending_.clear();
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
    if (p.n > 0) out.push_back({p.name, master(it->second), p.region});  // a rank without a chunk holds nothing
  }
  return out;
}

void ZeroPartition::after_load() {
  if (master_weights_)
    for (size_t i = 0; i < parts_.size(); ++i) release_master(i, true);  // offloaded: back to the store
  refresh_working();
}

}  // namespace booster::plugins

