// CachingHostTier (see caching_tier.h).
#include "core/tensor/caching_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/common/check.h"

namespace booster {

CachingHostTier::CachingHostTier(std::string name, size_t cache_limit)
    : MemoryTier(std::move(name)), limit_(cache_limit) {}

CachingHostTier::~CachingHostTier() { empty_cache(); }

namespace {
// Cached size classes are mapped from the OS directly, so a block given back leaves the
// process at once: from malloc's heap it could stay resident (glibc raises its mmap
// threshold as large blocks are freed), and a memory cap (Gemini's) could not hold.
// Blocks of 2 MB and more start on a 2 MB boundary and are marked for transparent huge
// pages (the kernel's "madvise" mode grants them only on request): fewer TLB misses in
// matmuls that stride across large operands. ViT-B b8 fp32 step, 2 threads, alternated
// runs: +2.5 % img/s, big matmuls 3-4 % faster by oneDNN's own timings; bf16 unchanged.
// BOOSTER_THP=0 maps them with small pages.
//
// Cached blocks under 2 MB (ViT-Ti's activations: [1576, 192] is 605 KB in bf16, 1.2 MB
// in f32) are carved from slabs of four huge pages (kSlab), a slab's other blocks going idle
// into the cache: one block to a huge page of its own would double the footprint, and on
// small pages the step's passes over them miss the TLB every 4 KB. ViT-Ti bf16 step
// (vit_benchmark --model vit-tiny --batch 8 --steps 10, 2 threads), 5 pairs of runs
// alternated: 43.8, 43.7, 48.8, 48.3, 45.1 -> 45.2, 49.2, 49.8, 49.5, 46.1 img/s, RSS 295 ->
// 307 MB (one block to a huge page of its own: alike in speed, RSS 630 MB); f32, 3 pairs:
// 23.3, 22.9, 22.8 -> 23.2, 23.2, 23.4.
constexpr size_t kHugePage = size_t(1) << 21;

// len bytes on a 2 MB boundary, marked for huge pages (advice only: refused, they stay small).
void* map_huge(size_t len) {
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = (r + kHugePage - 1) & ~(kHugePage - 1);
  if (a > r) ::munmap(raw, a - r);                                // head before the boundary
  ::munmap(reinterpret_cast<void*>(a + len), r + kHugePage - a);  // tail past the block
  ::madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(a);
}

void* map_block(size_t cls) {
  if (CachingHostTier::huge_pages() && cls >= kHugePage) return map_huge(cls);
  void* raw = ::mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return raw == MAP_FAILED ? nullptr : raw;
}

void unmap_block(void* p, size_t cls) { ::munmap(p, cls); }  // a slab's block: the rest stays mapped

constexpr size_t kSlab = 4 * kHugePage;

// This thread's slot among the idle lists (CachingHostTier::kSlots of them): threads in the
// order they first freed or allocated a cached block.
size_t thread_slot() {
  static std::atomic<size_t> next{0};
  thread_local const size_t slot = next.fetch_add(1, std::memory_order_relaxed) % CachingHostTier::kSlots;
  return slot;
}
// Under a footprint limit (Gemini's memory cap, which counts the resident set), blocks under
// this size go back to the OS when freed instead of idling in the cache.
constexpr size_t kMinKeptUnderLimit = size_t(1) << 18;
}  // namespace

bool CachingHostTier::huge_pages() {
  static const bool on = [] {
    const char* e = std::getenv("BOOSTER_THP");
    return !e || std::string(e) != "0";
  }();
  return on;
}

size_t CachingHostTier::size_class(size_t nbytes) {
  if (nbytes < kMinCached) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const size_t step = std::bit_floor(nbytes) / 16;
  return (nbytes + step - 1) / step * step;
}

void* CachingHostTier::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t cls = size_class(nbytes);
  void* p = nullptr;
  if (cls >= kMinCached) {
    const size_t own = thread_slot();
    std::lock_guard lock(mu_);
    for (size_t k = 0; k < kSlots && !p; ++k) {  // this thread's own idle blocks first
      auto it = free_.find(free_key(cls, (own + k) % kSlots));
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
      }
    }
    if (const size_t n = kSlab / cls; p) {
      // an idle block
    } else if (huge_pages() && cls < kHugePage && footprint_limit_ == 0 && cached_ + (n - 1) * cls <= limit_) {
      // A new slab: this block and n - 1 idle ones (not under a footprint limit, which the
      // idle ones would eat into, nor past the cache's own limit), this thread's.
      if (auto* slab = static_cast<char*>(map_huge(n * cls))) {
        p = slab;
        for (size_t i = 1; i < n; ++i) free_[free_key(cls, own)].push_back(slab + i * cls);
        cached_ += (n - 1) * cls;
      }
    } else {
      make_room(cls);  // a new block: idle ones of other sizes go first under a footprint limit
    }
  }
  auto fresh = [&] { return cls >= kMinCached ? map_block(cls) : std::aligned_alloc(kAlignment, cls); };
  if (!p) p = fresh();
  if (!p && bytes_cached() > 0) {  // out of memory with idle blocks: give them back, retry
    empty_cache();
    p = fresh();
  }
  BOOSTER_CHECK_T(BackendError, p != nullptr, "memory tier '", name(), "': out of memory allocating ", nbytes,
                  " bytes (in use: ", bytes_in_use(), ")");
  account_alloc(nbytes);
  return p;
}

void CachingHostTier::deallocate(void* p, size_t nbytes) {
  if (!p) return;
  account_free(nbytes);
  const size_t cls = size_class(nbytes);
  if (cls >= kMinCached) {
    std::lock_guard lock(mu_);
    const bool keep = footprint_limit_ == 0 ||
                      (cls >= kMinKeptUnderLimit && bytes_in_use() + cached_ + cls <= footprint_limit_);
    if (cached_ + cls <= limit_ && keep) {
      free_[free_key(cls, thread_slot())].push_back(p);
      cached_ += cls;
      return;
    }
    unmap_block(p, cls);
    return;
  }
  std::free(p);
}

size_t CachingHostTier::bytes_cached() const {
  std::lock_guard lock(mu_);
  return cached_;
}

void CachingHostTier::empty_cache() {
  std::lock_guard lock(mu_);
  for (auto& [key, blocks] : free_)
    for (void* p : blocks) unmap_block(p, key / kSlots);
  free_.clear();
  cached_ = 0;
}

void CachingHostTier::set_footprint_limit(size_t nbytes) {
  std::lock_guard lock(mu_);
  footprint_limit_ = nbytes;
  make_room(0);
}

void CachingHostTier::make_room(size_t incoming) {
  if (footprint_limit_ == 0) return;
  for (auto it = free_.begin(); it != free_.end() && bytes_in_use() + cached_ + incoming > footprint_limit_;) {
    auto& blocks = it->second;
    while (!blocks.empty() && bytes_in_use() + cached_ + incoming > footprint_limit_) {
      unmap_block(blocks.back(), it->first / kSlots);
      blocks.pop_back();
      cached_ -= it->first / kSlots;
    }
    it = blocks.empty() ? free_.erase(it) : std::next(it);
  }
}

size_t host_cache_limit_from_env() {
  if (const char* e = std::getenv("BOOSTER_HOST_CACHE_MB")) {
    char* end = nullptr;
    const long long mb = std::strtoll(e, &end, 10);
    BOOSTER_CHECK(end != e && *end == '\0' && mb >= 0, "BOOSTER_HOST_CACHE_MB must be a number of megabytes >= 0, got '",
                  e, "'");
    return size_t(mb) << 20;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) / 4 : size_t(1) << 30;
}

}  // namespace booster
