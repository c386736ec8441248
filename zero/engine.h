// The ZeRO engine: one rank's share of ZeRO over a data-parallel group, composed of its
// parts (layout.h, shard_store.h, gatherer.h, grad_reducer.h, fetch_hooks.h).
// LowLevelZeroPlugin, GeminiPlugin and HybridParallelPlugin's ZeRO each build one through
// apply_zero (model.h); Gemini adds the fetch hooks of ZeRO-3 and a placement policy.
#pragma once

#include <functional>
#include <memory>

#include "zero/fetch_hooks.h"
#include "zero/options.h"

namespace booster::zero {

/// A policy that moves states between RAM and the disk tier between steps (Gemini's auto
/// placement implements it).
class Placement {
 public:
  virtual ~Placement() = default;
  /// Called on every rank of the group after each step (applied or skipped).
  virtual void after_step() = 0;
};

class Engine {
 public:
  /// `params` (the optimizer's) over `dp`, as `opts` says: the working precision, masters,
  /// the disk tier, buckets and the gradient reduction. A placer puts parameters on groups
  /// of their own, split or whole (see layout.h).
  Engine(const optim::NamedParams& params, const dist::ProcessGroup& dp, const ZeroOptions& opts, PartPlacer placer = {});
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Layout& layout() { return layout_; }
  const Layout& layout() const { return layout_; }
  ShardStore& shards() { return shards_; }
  const ShardStore& shards() const { return shards_; }
  Gatherer& gatherer() { return gatherer_; }
  GradReducer& grads() { return grads_; }
  const GradReducer& grads() const { return grads_; }

  /// ZeRO-3: module hooks on `root` fetch sharded buckets where they are used (see
  /// fetch_hooks.h); chunk_elems sizes the buckets when the first step packs them again.
  void install_fetch_hooks(nn::Module& root, int max_prefetch,
                           std::function<int64_t(const std::vector<int64_t>&)> chunk_elems);
  void set_placement(std::shared_ptr<Placement> placement) { placement_ = std::move(placement); }
  /// After every optimizer step: the fetch hooks' packing, then the placement.
  void after_step();

 private:
  Layout layout_;
  ShardStore shards_;
  Gatherer gatherer_;
  GradReducer grads_;
  std::unique_ptr<FetchHooks> hooks_;
  std::shared_ptr<Placement> placement_;
};

}  // namespace booster::zero
