// ZeRO-3's fetch hooks (see fetch_hooks.h).
#include "zero/fetch_hooks.h"

#include <spdlog/spdlog.h>

#include "core/autograd/engine.h"
#include "core/dist/runtime.h"

namespace booster::zero {

FetchHooks::FetchHooks(nn::Module& root, Layout& layout, Gatherer& gatherer, GradReducer& grads, int max_prefetch,
                       std::function<int64_t(const std::vector<int64_t>&)> chunk_elems)
    : root_(root), layout_(layout), gatherer_(gatherer), grads_(grads), max_prefetch_(max_prefetch),
      chunk_elems_(std::move(chunk_elems)), used_(layout.size(), false) {
  install();
}

void FetchHooks::after_step() {
  if (repacked_ || first_use_.empty() || !chunk_elems_) return;
  repacked_ = true;
  repack();
}

void FetchHooks::install() {
  hooks_.clear();
  fwd_ = bwd_ = Trace{};
  std::map<std::string, size_t> part_of;
  for (size_t i = 0; i < layout_.size(); ++i) part_of[layout_.parts()[i].name] = i;
  done_.assign(layout_.buckets().size(), 0);
  for (auto& [path, m] : root_.named_modules()) {
    std::vector<size_t> mine;  // parts of this module's own parameters
    for (auto& [n, p] : m->named_parameters(false)) {
      auto it = part_of.find(path.empty() ? n : path + "." + n);
      if (it != part_of.end()) mine.push_back(it->second);
    }
    if (!mine.empty()) install_module(*m, mine);
  }
  // A forward starts counting anew; the first forward and backward record the order in
  // which buckets are used, for prefetching the next ones.
  hooks_.push_back(root_.register_forward_pre_hook([this](nn::Module&) {
    std::fill(done_.begin(), done_.end(), 0);
    recording_ = first_use_.empty();
    if (!fwd_.order.empty()) fwd_.recorded = true;
    if (!bwd_.order.empty()) bwd_.recorded = true;
  }));
  hooks_.push_back(root_.register_forward_hook([this](nn::Module&) { recording_ = false; }));
}

void FetchHooks::install_module(nn::Module& m, const std::vector<size_t>& mine) {
  std::map<size_t, int> uses;  // bucket -> this module's parameters in it
  for (size_t i : mine) ++uses[layout_.bucket_of(i)];
  // A forward inside a backward is a checkpointed layer's recomputation (nn::checkpoint): a
  // backward use (its buckets stay for the backward that follows and go once their gradients
  // are read; read-ahead follows the backward's order, not the forward's).
  hooks_.push_back(m.register_forward_pre_hook([this, uses, mine](nn::Module&) {
    const bool recompute = autograd::in_backward();
    if (recording_ && !recompute)
      for (size_t i : mine)
        if (!used_[i]) used_[i] = true, first_use_.push_back(i);
    for (auto& [b, k] : uses) use(recompute ? bwd_ : fwd_, b);
  }));
  hooks_.push_back(m.register_forward_hook([this, uses](nn::Module&) {
    if (autograd::in_backward()) return;
    for (auto& [b, k] : uses)  // every parameter of the bucket used: it goes
      if ((done_[b] += k) >= int(layout_.buckets()[b].size())) gatherer_.release(b);
  }));
  hooks_.push_back(m.register_backward_pre_hook([this, uses](nn::Module&) {
    for (auto& [b, k] : uses) use(bwd_, b);
  }));
}

// Packs the buckets again, the parameters in the order the first forward used them (those
// it did not use first, so that backward's first buckets are complete early); the hooks
// and the reduction follow (a placement places the new buckets after).
void FetchHooks::repack() {
  const size_t n = layout_.size();
  std::vector<size_t> forward;
  for (size_t i = 0; i < n; ++i)
    if (!used_[i]) forward.push_back(i);
  forward.insert(forward.end(), first_use_.begin(), first_use_.end());
  // Every rank must pack alike (the buckets are collectives): the group's first rank decides.
  BOOSTER_CHECK(layout_.uniform(), "ZeRO-3: chunks are packed again over one data-parallel group only");
  const auto& dp = layout_.group();
  if (dp.size() > 1) {
    Tensor order = Tensor::empty({int64_t(n)}, DType::i64);
    for (size_t k = 0; k < n; ++k) order.data<int64_t>()[k] = int64_t(forward[k]);
    dist::broadcast(order, dp.ranks()[0], dp);
    for (size_t k = 0; k < n; ++k) forward[k] = size_t(order.data<int64_t>()[k]);
  }
  std::vector<size_t> backward(forward.rbegin(), forward.rend());
  std::vector<int64_t> numels;
  for (size_t i : backward) numels.push_back(layout_.parts()[i].numel);
  auto buckets = layout_.pack_buckets(backward, double(chunk_elems_(numels)));
  if (buckets == layout_.buckets()) return;
  gatherer_.rebucket(std::move(buckets));
  grads_.rebucket();
  install();
  if (dist::world_rank() == 0)
    spdlog::info("ZeRO-3: {} chunks packed again in the order the first forward used the parameters",
                 layout_.buckets().size());
}

void FetchHooks::use(Trace& t, size_t b) {
  if (!t.recorded && !t.position.count(b)) {
    t.position[b] = t.order.size();
    t.order.push_back(b);
  }
  gatherer_.fetch(b);
  if (!t.recorded) return;
  auto it = t.position.find(b);
  if (it == t.position.end()) return;
  if (it->second + 1 < t.order.size() && !gatherer_.is_fetched(t.order[it->second + 1]))
    gatherer_.prefetch_own(t.order[it->second + 1]);  // its slices on disk are read ahead
  for (size_t j = it->second + 1; j < t.order.size() && j <= it->second + size_t(max_prefetch_); ++j)
    gatherer_.prefetch(t.order[j]);
}

}  // namespace booster::zero
