// The ZeRO engine (see engine.h).
#include "zero/engine.h"

namespace booster::zero {

namespace {
std::shared_ptr<OffloadStore> disk_tier_for(const ZeroOptions& opts) {
  return opts.cpu_offload ? std::make_shared<OffloadStore>(opts.offload_dir) : nullptr;
}
DType comm_dtype(const ZeroOptions& opts) {
  return dtype_from_name(opts.communication_dtype.empty() ? opts.precision : opts.communication_dtype);
}
}  // namespace

Engine::Engine(const optim::NamedParams& params, const dist::ProcessGroup& dp, const ZeroOptions& opts, PartPlacer placer)
    : layout_(params, dp, opts.reduce_bucket_size_in_m * double(1 << 20), std::move(placer)),
      shards_(layout_, dtype_from_name(opts.precision), opts.master_weights, disk_tier_for(opts), opts.offload_frac),
      gatherer_(layout_, shards_),
      grads_(layout_, shards_, gatherer_, opts.stage, opts.overlap_communication, comm_dtype(opts)) {}

void Engine::install_fetch_hooks(nn::Module& root, int max_prefetch,
                                 std::function<int64_t(const std::vector<int64_t>&)> chunk_elems) {
  hooks_.reset();  // the old ones are removed first
  hooks_ = std::make_unique<FetchHooks>(root, layout_, gatherer_, grads_, max_prefetch, std::move(chunk_elems));
}

void Engine::after_step() {
  if (hooks_) hooks_->after_step();
  if (placement_) placement_->after_step();
}

}  // namespace booster::zero
