// Reducer (see reducer.h).
#include "ddp/reducer.h"

#include <map>

#include "core/autograd/engine.h"

namespace booster::ddp {

Reducer::Reducer(const optim::NamedParams& params, const dist::ProcessGroup& group, ReducerOptions opts)
    : group_(group), opts_(opts) {
  for (auto& np : params)
    if (np.second.requires_grad()) params_.push_back(np);
  ready_.assign(params_.size(), false);
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor p = params_[k].second;
    hooks_.push_back(p.register_post_accumulate_grad_hook([this, k](const Tensor&) { on_ready(k); }));
  }
}

void Reducer::assign_buckets() {
  if (!buckets_.empty() || params_.empty()) return;
  // At the first backward, not at construction: mixed precision turns the parameters into
  // bf16/fp16 working copies after the plugin wrapped the model, and a bucket holds its
  // parameters' dtype (as PyTorch's do): bf16 gradients are averaged as bf16 (f32 sums in
  // the ring, ring_collectives.h), with half the bytes to copy and send of f32 buckets.
  // The first bucket (the last layers, final first in backward) is capped at 1 MB, as
  // PyTorch does, so communication starts early and overlaps the rest of backward.
  const double cap_bytes = opts_.bucket_cap_mb * 1024 * 1024;
  const double first_cap = std::min(cap_bytes, 1024.0 * 1024.0);
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  std::map<DType, size_t> open;  // each dtype fills its own open bucket
  std::vector<int64_t> sizes;    // elements per bucket
  // Reverse registration order: the last layers' gradients are final first.
  for (size_t k = params_.size(); k-- > 0;) {
    const DType dt = params_[k].second.dtype();
    const int64_t numel = params_[k].second.numel();
    auto it = open.find(dt);
    const double cap = it != open.end() && it->second == 0 ? first_cap : cap_bytes;
    const bool full = it != open.end() && sizes[it->second] > 0 &&
                      double(sizes[it->second] + numel) * double(dtype_size(dt)) > cap;
    if (it == open.end() || full) {
      buckets_.emplace_back();
      sizes.push_back(0);
      it = open.insert_or_assign(dt, buckets_.size() - 1).first;
    }
    bucket_of_[k] = it->second;
    offset_of_[k] = size_t(sizes[it->second]);
    buckets_[it->second].params.push_back(k);
    sizes[it->second] += numel;
  }
  for (size_t i = 0; i < buckets_.size(); ++i)
    buckets_[i].flat = Tensor::zeros({sizes[i]}, params_[buckets_[i].params[0]].second.dtype());
}

void Reducer::on_ready(size_t k) {
  if (no_sync_ || defer_) return;
  assign_buckets();
  if (!started_) autograd::queue_callback([this] { finish(); });  // the end of this backward
  started_ = true;
  if (ready_[k]) return;  // marked already (each leaf's hook fires once a backward)
  ready_[k] = true;
  ++buckets_[bucket_of_[k]].ready;
  launch_ready_in_order();
  // Let in-flight buckets progress while backward computes.
  for (size_t i = 0; i < next_launch_; ++i)
    if (buckets_[i].work) buckets_[i].work->test();
}

void Reducer::launch(Bucket& b) {
  NoGradGuard ng;
  for (size_t k : b.params) {
    Tensor g = params_[k].second.grad();
    Tensor dst = b.flat.narrow(0, int64_t(offset_of_[k]), params_[k].second.numel());
    if (g.defined()) dst.copy_(g.view({-1}));
    else dst.zero_();
  }
  b.work = dist::all_reduce(b.flat, dist::ReduceOp::avg, group_, /*async_op=*/true);
}

void Reducer::launch_ready_in_order() {
  // Buckets launch strictly in order, so every rank issues the same collective sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size())
    launch(buckets_[next_launch_++]);
}

void Reducer::sync_accumulated() {
  if (no_sync_) return;
  assign_buckets();
  for (size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) ready_[k] = true, ++buckets_[bucket_of_[k]].ready;
  started_ = true;
  finish();
}

void Reducer::finish() {
  if (!started_) return;
  std::string unused;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    if (!opts_.find_unused_parameters) {
      unused += (unused.empty() ? "" : ", ") + params_[k].first;
      continue;
    }
    ready_[k] = true;
    ++buckets_[bucket_of_[k]].ready;
  }
  BOOSTER_CHECK(unused.empty(), opts_.owner, ": parameters received no gradient in this backward: ", unused,
                ". Set find_unused_parameters = true if parts of the model are not used every step.");
  launch_ready_in_order();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) b.work->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NoGradGuard ng;
  for (auto& b : buckets_) {
    for (size_t k : b.params) {
      Tensor p = params_[k].second;
      Tensor avg = b.flat.narrow(0, int64_t(offset_of_[k]), p.numel()).view(p.shape());
      if (opts_.gradient_as_bucket_view && p.dtype() == b.flat.dtype()) {
        p.set_grad(avg);  // the gradient lives in the bucket: no copy, later backwards accumulate in place
      } else if (p.grad().defined()) {
        p.grad().copy_(avg);
      } else {
        p.set_grad(avg.to(p.dtype()).clone());
      }
    }
    b.ready = 0;
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  started_ = false;
}

}  // namespace booster::ddp
