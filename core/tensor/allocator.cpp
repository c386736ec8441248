// Host tier and the tier registry.
#include "core/tensor/allocator.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "core/common/check.h"
#include "core/tensor/caching_tier.h"

namespace booster {

void* MemoryTier::allocate(size_t nbytes) {
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
  BOOSTER_CHECK_T(BackendError, rounded == 0 || p != nullptr, "memory tier '", name_,
                  "': out of memory allocating ", nbytes, " bytes (in use: ", bytes_in_use(), ")");
  account_alloc(nbytes);
  return p;
}

void MemoryTier::deallocate(void* p, size_t nbytes) {
  std::free(p);
  account_free(nbytes);
}

void MemoryTier::account_alloc(size_t nbytes) {
  const size_t now = in_use_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void MemoryTier::account_free(size_t nbytes) { in_use_.fetch_sub(nbytes, std::memory_order_relaxed); }

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<MemoryTier>> tiers;
};
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: tensors may outlive static destruction
    reg->tiers.emplace("host", std::make_unique<CachingHostTier>("host", host_cache_limit_from_env()));
    return reg;
  }();
  return *r;
}
}  // namespace

size_t resident_set_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  if (!(in >> pages >> resident)) return 0;
  return resident * size_t(::sysconf(_SC_PAGE_SIZE));
}

MemoryTier& host_tier() {
  static MemoryTier& host = memory_tier("host");
  return host;
}

MemoryTier& register_tier(std::unique_ptr<MemoryTier> tier) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  const std::string name = tier->name();
  BOOSTER_CHECK(!r.tiers.count(name), "register_tier: a memory tier named '", name, "' exists already");
  return *r.tiers.emplace(name, std::move(tier)).first->second;
}

MemoryTier& memory_tier(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.tiers.find(name);
  if (it == r.tiers.end()) {
    std::string known;
    for (auto& [n, t] : r.tiers) known += (known.empty() ? "" : ", ") + n;
    BOOSTER_THROW(ValueError, "memory_tier: no tier named '", name, "' (known: ", known, ")");
  }
  return *it->second;
}

std::vector<std::string> memory_tier_names() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (auto& [n, t] : r.tiers) names.push_back(n);
  return names;
}

}  // namespace booster
