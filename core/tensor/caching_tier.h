// The host tier: RAM with a cache of freed large blocks. A training step allocates the
// same activation and gradient sizes every iteration; handing each one back to malloc
// returns it to the OS (glibc mmaps blocks past 32 MB), so the next step page-faults the
// whole working set again. Measured on ViT-B bf16 (vit_benchmark --profile): GELU 31 ms ->
// 5.6 ms a call, a whole step 2.6 s -> 1.9 s. Small blocks (under 64 KB) go straight to
// malloc.
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor/allocator.h"

namespace booster {

class CachingHostTier : public MemoryTier {
 public:
  /// `cache_limit`: most bytes kept idle in the cache (beyond it, freed blocks go back to
  /// the OS).
  CachingHostTier(std::string name, size_t cache_limit);
  ~CachingHostTier() override;

  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;
  size_t bytes_cached() const override;
  void empty_cache() override;
  void set_footprint_limit(size_t nbytes) override;

  /// True unless BOOSTER_THP=0: blocks of 2 MB and more are then 2 MB aligned and marked for
  /// transparent huge pages, and smaller cached ones are carved from huge-page slabs of 8 MB
  /// (the rest of a slab idle in the cache; not under a footprint limit).
  static bool huge_pages();
  /// Blocks at least this large are cached: 64 KB, so that ViT-Ti's weights and their
  /// gradients (74-221 KB in bf16) come from huge-page slabs too. ViT-Ti bf16 step, 4 pairs
  /// of runs alternated with 256 KB: 45.96, 45.40, 49.48, 49.30 -> 46.44, 46.18, 50.19,
  /// 50.01 img/s, RSS 307 -> 313 MB (16 KB: alike); f32 about even.
  static constexpr size_t kMinCached = size_t(1) << 16;
  /// Idle blocks are kept per size class and per the thread that freed them (threads share
  /// kSlots lists), and a thread takes its own back first: a block's cache lines sit in the
  /// caches of the thread that last touched it, and threads that each run a share of a batch
  /// (nn::split_batch) on different L3 domains would otherwise write over each other's lines
  /// at every allocation.
  static constexpr size_t kSlots = 8;
  /// The size class a request of nbytes is served from: multiples of 1/16 of its power
  /// of two (at most 6.25 % slack), so a slightly smaller last batch reuses a block.
  static size_t size_class(size_t nbytes);

 private:
  /// Gives back idle blocks until `incoming` more bytes keep the footprint under its limit.
  void make_room(size_t incoming);  // mu_ held

  static size_t free_key(size_t cls, size_t slot) { return cls * kSlots + slot; }

  size_t limit_;
  size_t footprint_limit_ = 0;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // free_key(size class, slot) -> idle blocks
  size_t cached_ = 0;
};

/// Idle-cache limit of the host tier: BOOSTER_HOST_CACHE_MB, else a quarter of RAM.
size_t host_cache_limit_from_env();

}  // namespace booster
