// A reference-counted block of bytes owned by a memory tier (or borrowed from elsewhere).
#pragma once

#include <cstddef>
#include <functional>

#include "core/tensor/allocator.h"

namespace booster {

/// Bytes behind one or more tensors.
class Storage {
 public:
  /// Allocates nbytes from `tier` (uninitialized).
  Storage(size_t nbytes, MemoryTier& tier) : data_(tier.allocate(nbytes)), nbytes_(nbytes), tier_(&tier) {}
  /// Wraps memory owned elsewhere; `release` runs when the storage dies.
  Storage(void* data, size_t nbytes, std::function<void(void*)> release)
      : data_(data), nbytes_(nbytes), release_(std::move(release)) {}
  ~Storage() {
    if (tier_) tier_->deallocate(data_, nbytes_);
    else if (release_) release_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  /// The owning tier, or nullptr for borrowed memory.
  MemoryTier* tier() const { return tier_; }

 private:
  void* data_;
  size_t nbytes_;
  MemoryTier* tier_ = nullptr;
  std::function<void(void*)> release_;
};

}  // namespace booster
