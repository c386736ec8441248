// ZeRO gradient reduction (see grad_reducer.h).
#include "zero/grad_reducer.h"

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/raw.h"

namespace booster::zero {

GradReducer::GradReducer(Layout& layout, ShardStore& shards, Gatherer& gatherer, int stage, bool overlap, DType comm)
    : layout_(layout), shards_(shards), gatherer_(gatherer), stage_(stage), overlap_(overlap), comm_(comm) {
  const auto& parts = layout_.parts();
  bucket_of_.resize(parts.size());
  ready_.assign(parts.size(), false);
  chunks_.resize(parts.size());
  slot_.assign(parts.size(), -1);
  has_.assign(parts.size(), false);
  averaged_.assign(parts.size(), false);
  noted_.resize(parts.size());
  rebucket();
  for (size_t i = 0; i < parts.size(); ++i) {
    Tensor p = parts[i].param;
    hooks_.push_back(p.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_ready(i); }));
    if (stage_ == 1)
      hooks_.push_back(p.register_pre_accumulate_grad_hook([this, i](const Tensor&) { settle(i); }));
  }
}

void GradReducer::rebucket() {
  BOOSTER_CHECK(!started_ && next_launch_ == 0, "ZeRO GradReducer.rebucket: a reduction is in progress");
  buckets_.assign(layout_.buckets().size(), Bucket{});
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    for (size_t i : layout_.buckets()[b]) bucket_of_.at(i) = b;
}

void GradReducer::on_ready(size_t i) {
  if ((stage_ == 1 && no_sync_) || defer_) return;  // full gradients accumulate locally
  if (!started_) autograd::queue_callback([this] { finish(); });  // the end of this backward
  started_ = true;
  if (ready_[i]) return;
  ready_[i] = true;
  ++buckets_[bucket_of_[i]].ready;
  if (!overlap_) return;
  launch_ready_in_order();
  for (size_t b = next_complete_; b < next_launch_; ++b)  // let in-flight buckets progress while backward computes
    if (buckets_[b].work) buckets_[b].work->test();
}

void GradReducer::launch_ready_in_order() {
  // Buckets launch strictly in order, so every rank issues the same collective sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == layout_.buckets()[next_launch_].size()) {
    launch(next_launch_++);
    while (max_inflight_ > 0 && next_launch_ - next_complete_ > max_inflight_) complete_oldest();
  }
}

void GradReducer::complete_oldest() {
  const auto t0 = std::chrono::steady_clock::now();
  {
    ProfileScope prof_("zero reduce-scatter wait");
    buckets_[next_complete_].work->wait();
  }
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  complete(next_complete_++);
}

void GradReducer::launch(size_t b) {
  ProfileScope prof_("zero reduce-scatter launch");
  NoGradGuard ng;
  const auto& ids = layout_.buckets()[b];
  auto& parts = layout_.parts();
  const int64_t width = layout_.width(ids);
  const auto& group = layout_.group_of(ids);
  const bool whole = parts[ids.front()].replicated;  // DDP: one block, all-reduced
  const int n = whole ? 1 : group.size();
  // [rank][parameter chunk]: block r holds every parameter's chunk r, padded with zeros.
  Tensor stage = Tensor::empty({n * width}, comm_);
  for (size_t i : ids) settle(i);  // no gradient in this backward: its average counts once
  for (int r = 0; r < n; ++r) {
    int64_t off = int64_t(r) * width;
    for (size_t i : ids) {
      const auto& p = parts[i];
      const auto [lo, len] = p.range_of(r);
      Tensor g = p.param.grad();
      Tensor dst = stage.narrow(0, off, p.chunk);
      if (g.defined() && len > 0) dst.narrow(0, 0, len).copy_(g.view({-1}).narrow(0, lo, len));
      else if (len > 0) dst.narrow(0, 0, len).zero_();
      if (len < p.chunk) dst.narrow(0, len, p.chunk - len).zero_();
      off += p.chunk;
    }
  }
  Bucket& bk = buckets_[b];
  if (whole) {
    bk.out = stage;
    bk.work = dist::all_reduce(bk.out, dist::ReduceOp::avg, group, /*async_op=*/true);
  } else {
    bk.out = Tensor::empty({width}, comm_);
    // Reduced in the stage itself; the Work keeps the stage alive until it completes.
    bk.work = dist::reduce_scatter(bk.out, stage, dist::ReduceOp::avg, group, /*async_op=*/true,
                                   /*input_is_scratch=*/true);
  }
  if (stage_ == 2)
    for (size_t i : ids) {  // only the chunks are kept
      Tensor p = parts[i].param;
      p.set_grad(Tensor());
    }
  gatherer_.release(b);  // ZeRO-3: the bucket's parameters go once their gradients are read
}

void GradReducer::complete(size_t b) {
  NoGradGuard ng;
  Bucket& bk = buckets_[b];
  auto& parts = layout_.parts();
  int64_t off = 0;
  for (size_t i : layout_.buckets()[b]) {
    auto& p = parts[i];
    Tensor mine = bk.out.narrow(0, off, p.n);
    off += p.chunk;
    if (stage_ == 1) averaged_[i] = true;  // also without a chunk here: the other slices were counted
    if (p.n == 0) continue;
    if (stage_ == 2 && shards_.at(i).own_slot >= 0) {  // on the disk tier with the parameter's slice
      OffloadStore& store = *shards_.store();
      if (has_[i]) {  // accumulating over micro-batches
        Tensor acc = store.get(slot_[i]);
        kernels::add_(acc, mine);
        renote(i, acc);
        store.release(slot_[i], true);
      } else {
        Tensor value = mine.dtype() == DType::f32 ? mine.clone() : mine.to(DType::f32);  // one copy, given to the store
        renote(i, value);
        if (slot_[i] < 0) slot_[i] = store.put(value, shards_.at(i).resident);
        else store.assign(slot_[i], value, /*owned=*/true);
        has_[i] = true;
      }
    } else if (stage_ == 2) {
      if (chunks_[i].defined()) kernels::add_(chunks_[i], mine);
      else chunks_[i] = mine.to(DType::f32).contiguous().clone();
    } else {
      Tensor param = p.param;
      if (!param.grad().defined()) param.set_grad(Tensor::zeros(param.shape(), param.dtype()));
      param.grad().view({-1}).narrow(0, p.lo, p.n).copy_(mine);
    }
  }
  bk.out = Tensor();
  bk.work.reset();
  bk.ready = 0;
}

void GradReducer::sync_accumulated() {
  if (stage_ == 1 && no_sync_) return;
  started_ = true;
  finish();
}

void GradReducer::finish() {
  if (!started_) return;
  for (size_t i = 0; i < ready_.size(); ++i)
    if (!ready_[i]) {  // no gradient this backward: counts as zero
      ready_[i] = true;
      ++buckets_[bucket_of_[i]].ready;
    }
  launch_ready_in_order();
  while (next_complete_ < buckets_.size()) complete_oldest();
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = next_complete_ = 0;
  started_ = false;
}

void GradReducer::settle(size_t i) {
  if (!averaged_.at(i)) return;
  averaged_[i] = false;
  const auto& p = layout_.parts()[i];
  Tensor g = p.param.grad();
  if (!g.defined()) return;
  NoGradGuard ng;
  Tensor flat = g.view({-1});
  Tensor own = flat.narrow(0, p.lo, p.n);
  kernels::scale_(own, double(p.replicated ? 1 : p.group->size()));
  if (p.lo > 0) flat.narrow(0, 0, p.lo).zero_();
  if (p.lo + p.n < p.numel) flat.narrow(0, p.lo + p.n, p.numel - p.lo - p.n).zero_();
}

Tensor GradReducer::chunk(size_t i) const {
  const auto& p = layout_.parts().at(i);
  if (stage_ == 2) return chunks_[i];
  Tensor g = p.param.grad();
  return g.defined() ? g.view({-1}).narrow(0, p.lo, p.n) : Tensor();
}

Tensor GradReducer::fetch(size_t i) const {
  if (!on_disk(i)) return chunk(i);
  return has_[i] ? shards_.store()->get(slot_[i]) : Tensor();
}

void GradReducer::prefetch(size_t i) const {
  if (on_disk(i) && has_[i]) shards_.store()->prefetch(slot_[i]);
}

void GradReducer::release(size_t i, bool dirty) const {
  if (on_disk(i) && has_[i]) shards_.store()->release(slot_[i], dirty);
}

void GradReducer::renote(size_t i, const Tensor& chunk) {
  noted_.at(i) = {kernels::all_finite(chunk), kernels::sum_squares(chunk)};
}

void GradReducer::zero() {
  NoGradGuard ng;
  std::fill(has_.begin(), has_.end(), false);
  std::fill(averaged_.begin(), averaged_.end(), false);
  for (size_t i = 0; i < layout_.parts().size(); ++i) {
    Tensor p = layout_.parts()[i].param;
    p.set_grad(Tensor());
    chunks_[i] = Tensor();
  }
}

}  // namespace booster::zero
