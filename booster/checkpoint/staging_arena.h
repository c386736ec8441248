// Memory an asynchronous save copies its snapshot into. It is kept from one save to the next
// (as Colossal-AI keeps its pinned state dicts), so only the first save of a kind pays for
// fresh pages, and those come as transparent huge pages where the kernel offers them: a
// snapshot of a few GB is then a memory copy, not hundreds of thousands of page faults.
#pragma once

#include <cstddef>

#include "core/tensor/tensor.h"

namespace booster::ckpt {

class StagingArena {
 public:
  StagingArena() = default;
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  /// What a tensor of `bytes` takes in the arena (its start aligned to a cache line).
  static size_t slot_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }
  /// Starts a snapshot of `bytes` in all (the sum of its tensors' slot_bytes): the arena
  /// grows to hold it (its earlier contents are dropped: no tensor of an earlier snapshot
  /// may be alive).
  void begin(size_t bytes);
  /// A copy of `src` (contiguous, in the arena) valid until the next begin(); the snapshot's
  /// bytes were announced by begin().
  Tensor stage(const Tensor& src);
  /// Bytes the arena holds between saves.
  size_t capacity() const { return capacity_; }

 private:
  void* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

}  // namespace booster::ckpt
