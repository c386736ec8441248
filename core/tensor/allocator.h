// Memory tiers: every tensor byte is allocated from a tier that accounts bytes in use and
// the peak. "host" (RAM, 64-byte aligned, freed large blocks cached) is the default; later plugins register slower
// tiers (a file-backed store for offload) and report their memory from these counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace booster {

/// Alignment of every allocation, in bytes (one cache line, one AVX-512 register).
constexpr size_t kAlignment = 64;

/// A place tensors live, with byte accounting.
class MemoryTier {
 public:
  explicit MemoryTier(std::string name) : name_(std::move(name)) {}
  virtual ~MemoryTier() = default;
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  /// Allocates nbytes aligned to kAlignment; throws BackendError when out of memory.
  virtual void* allocate(size_t nbytes);
  /// Releases a block returned by allocate(nbytes).
  virtual void deallocate(void* p, size_t nbytes);

  /// The tier's name ("host", ...).
  const std::string& name() const { return name_; }
  /// Bytes currently allocated from this tier.
  size_t bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  /// Highest bytes_in_use() since start or the last reset_peak().
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  /// Sets the peak to the current use.
  void reset_peak() { peak_.store(bytes_in_use(), std::memory_order_relaxed); }
  /// Bytes freed by tensors but kept by the tier for reuse (not in bytes_in_use()).
  virtual size_t bytes_cached() const { return 0; }
  /// Returns the cached bytes to the system.
  virtual void empty_cache() {}
  /// Keeps bytes in use plus idle cached bytes under `nbytes` where the cache decides it
  /// (idle blocks are given back to make room rather than kept; 0: no limit): a memory
  /// cap then holds for what the process has resident. A tier without a cache ignores it.
  virtual void set_footprint_limit(size_t nbytes) { (void)nbytes; }

 protected:
  void account_alloc(size_t nbytes);
  void account_free(size_t nbytes);

 private:
  std::string name_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

/// The default tier: RAM, caching freed large blocks (caching_tier.h).
MemoryTier& host_tier();
/// The process's resident set now (/proc/self/statm): what a memory cap has to hold,
/// tiers and everything else; 0 where it cannot be read.
size_t resident_set_bytes();
/// Registers a tier under its name; throws ValueError if the name is taken.
MemoryTier& register_tier(std::unique_ptr<MemoryTier> tier);
/// Finds a registered tier by name; throws ValueError listing the known tiers.
MemoryTier& memory_tier(const std::string& name);
/// Names of all registered tiers.
std::vector<std::string> memory_tier_names();

}  // namespace booster
