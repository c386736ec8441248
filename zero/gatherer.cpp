// The ZeRO gatherer (see gatherer.h).
#include "zero/gatherer.h"

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/common/profiler.h"

namespace booster::zero {

Gatherer::Gatherer(Layout& layout, ShardStore& shards)
    : layout_(layout), shards_(shards), fetched_(layout.buckets().size(), false) {}

void Gatherer::settle() {
  wait_gather();
  for (auto& [b, pend] : prefetched_) pend.work->wait();
  prefetched_.clear();
}

void Gatherer::rebucket(std::vector<std::vector<size_t>> buckets) {
  NoGradGuard ng;
  settle();
  for (size_t b = 0; b < layout_.buckets().size(); ++b) release(b);
  layout_.set_buckets(std::move(buckets));
  fetched_.assign(layout_.buckets().size(), false);
  // A bucket holding a sharded part is sharded: the others give up their full parameter
  // (no communication; a part never goes back to whole).
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const auto& ids = layout_.buckets()[b];
    if (std::any_of(ids.begin(), ids.end(), [&](size_t i) { return shards_.sharded(i); })) shard_bucket(b);
  }
}

void Gatherer::shard_bucket(size_t b) {
  NoGradGuard ng;
  wait_gather();
  BOOSTER_CHECK(!layout_.parts()[layout_.buckets().at(b).front()].replicated, "ZeRO gatherer: bucket ", b,
                " holds parameters kept whole (DDP) and cannot be sharded");
  bool changed = false;
  for (size_t i : layout_.buckets().at(b))
    if (!shards_.sharded(i)) shards_.keep_own(i), changed = true;
  if (!changed) return;
  fetched_[b] = true;
  release(b);
}

void Gatherer::prefetch(size_t b) {
  if (is_fetched(b) || prefetched_.count(b)) return;
  prefetched_[b] = start_gather(layout_.buckets().at(b));
}

void Gatherer::prefetch_own(size_t b) const {
  for (size_t i : layout_.buckets().at(b)) shards_.prefetch_own(i);
}

void Gatherer::fetch(size_t b) {
  if (is_fetched(b)) return;
  ProfileScope prof_("gemini chunk fetch");
  NoGradGuard ng;
  prefetch(b);
  Pending pend = std::move(prefetched_.at(b));
  prefetched_.erase(b);
  finish_gather(pend, /*fresh=*/true);
  fetched_[b] = true;
}

void Gatherer::release(size_t b) {
  if (!is_sharded(b) || !fetched_.at(b)) return;
  for (size_t i : layout_.buckets()[b]) layout_.parts()[i].param.set_data(Tensor::empty({0}, shards_.working_dtype()));
  fetched_[b] = false;
}

void Gatherer::offload_bucket(size_t b) {
  BOOSTER_CHECK(is_sharded(b) && shards_.store(), "ZeRO gatherer: bucket ", b,
                " cannot move to the disk tier: it is not sharded, or there is no disk tier");
  NoGradGuard ng;
  for (size_t i : layout_.buckets()[b]) shards_.offload_own(i);
}

size_t Gatherer::full_bytes() const {
  size_t n = 0;
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    if (is_fetched(b))
      for (size_t i : layout_.buckets()[b]) n += size_t(layout_.parts()[i].numel) * dtype_size(shards_.working_dtype());
  return n;
}

Gatherer::Pending Gatherer::start_gather(const std::vector<size_t>& bucket) const {
  NoGradGuard ng;
  Tensor send = pack_own(bucket);
  const auto& dp = layout_.group_of(bucket);
  Pending pend{bucket, Tensor::empty({dp.size() * send.numel()}, shards_.working_dtype()), nullptr, send};
  pend.work = dist::all_gather(pend.recv, send, dp, /*async_op=*/true);
  return pend;
}

void Gatherer::finish_gather(Pending& pend, bool fresh) {
  NoGradGuard ng;
  pend.work->wait();
  const int64_t width = layout_.width(pend.parts);
  int64_t off = 0;
  for (size_t i : pend.parts) {
    Part& p = layout_.parts()[i];
    Tensor flat = fresh ? Tensor::empty({p.numel}, shards_.working_dtype()) : p.param.detach().view({-1});
    for (int r = 0; r < layout_.group_of(pend.parts).size(); ++r) {
      const auto [lo, len] = p.range_of(r);
      if (len > 0) flat.narrow(0, lo, len).copy_(pend.recv.narrow(0, r * width + off, len));
    }
    if (fresh) p.param.set_data(flat.view(p.shape));  // same handle: autograd and the optimizer keep it
    off += p.chunk;
  }
}

Tensor Gatherer::pack_own(const std::vector<size_t>& bucket) const {
  Tensor send = Tensor::zeros({layout_.width(bucket)}, shards_.working_dtype());
  int64_t off = 0;
  for (size_t i : bucket) {
    const Part& p = layout_.parts()[i];
    if (p.n > 0) {
      send.narrow(0, off, p.n).copy_(shards_.own_slice(i));
      shards_.release_own(i, false);
    }
    off += p.chunk;
  }
  return send;
}

void Gatherer::gather(bool async) {
  ProfileScope prof_("zero all-gather");
  NoGradGuard ng;
  settle();  // prefetches still in flight carry the slices from before the step
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    if (is_sharded(b)) {  // fetched when used; a copy still fetched is stale now
      release(b);
      continue;
    }
    if (layout_.parts()[layout_.buckets()[b].front()].replicated) continue;  // updated whole in place
    pending_.push_back(start_gather(layout_.buckets()[b]));
  }
  if (!async) wait_gather();
}

void Gatherer::refresh_working() {
  wait_gather();
  shards_.masters_to_own();
  gather(false);
}

void Gatherer::wait_gather() {
  if (pending_.empty()) return;
  ProfileScope prof_("zero all-gather wait");
  NoGradGuard ng;
  for (auto& pend : pending_) finish_gather(pend, /*fresh=*/false);
  pending_.clear();
}

}  // namespace booster::zero
