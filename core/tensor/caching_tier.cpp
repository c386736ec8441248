// CachingHostTier (see caching_tier.h).
#include "core/tensor/caching_tier.h"

#include <unistd.h>

#include <bit>
#include <cstdlib>

#include "core/common/check.h"

namespace booster {

CachingHostTier::CachingHostTier(std::string name, size_t cache_limit)
    : MemoryTier(std::move(name)), limit_(cache_limit) {}

CachingHostTier::~CachingHostTier() { empty_cache(); }

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
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
    }
  }
  if (!p) p = std::aligned_alloc(kAlignment, cls);
  if (!p && bytes_cached() > 0) {  // out of memory with idle blocks: give them back, retry
    empty_cache();
    p = std::aligned_alloc(kAlignment, cls);
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
    if (cached_ + cls <= limit_) {
      free_[cls].push_back(p);
      cached_ += cls;
      return;
    }
  }
  std::free(p);
}

size_t CachingHostTier::bytes_cached() const {
  std::lock_guard lock(mu_);
  return cached_;
}

void CachingHostTier::empty_cache() {
  std::lock_guard lock(mu_);
  for (auto& [cls, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  cached_ = 0;
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
