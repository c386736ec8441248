// OffloadStore: the slower tier behind ZeRO's cpu_offload and Gemini's placement. On a CPU
// cluster the fast memory is RAM and the slow one local disk (NVMe on a cluster node): a
// tensor put here lives in a file; a worker thread reads it into RAM ahead of use
// (prefetch) and writes it back behind (release), so RAM holds only a window of the
// store. Bytes on disk are accounted in the "disk" memory tier, RAM copies in the host
// tier like every tensor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster {

/// The tier that counts bytes held on disk by offload stores (nothing is allocated from it).
MemoryTier& disk_tier();

/// The folder of stores made without one: set_default_offload_dir's, else the system temp
/// folder. An application gives it to its run (vit_train: `<run folder>/offload`).
std::string default_offload_dir();
void set_default_offload_dir(const std::string& dir);

class OffloadStore {
 public:
  /// A store in a new file under `dir` (default_offload_dir() when empty). The file has no
  /// name: it is gone when the store or the process ends, however it ends. At most
  /// `max_inflight_writes` bytes wait to be written behind (release, put and assign wait for
  /// the oldest beyond it), so RAM holds a bounded window.
  explicit OffloadStore(const std::string& dir = "", size_t max_inflight_writes = size_t(64) << 20);
  ~OffloadStore();
  OffloadStore(const OffloadStore&) = delete;
  OffloadStore& operator=(const OffloadStore&) = delete;

  /// A new slot holding t's values (written behind; t need not outlive the call); its id.
  /// pinned: the values stay in RAM instead, pinned (written when unpinned).
  int64_t put(const Tensor& t, bool pinned = false);
  /// A new slot of `shape` and `dtype` whose values are not written yet: assign() fills it
  /// (before anything reads it). Loading a checkpoint straight into the disk tier.
  int64_t reserve(const Shape& shape, DType dtype);
  /// Overwrites slot `id` with t's values (same element count; converted to the slot's
  /// dtype): into its RAM copy when it has one, else written behind without a read.
  /// owned: the caller gives t up (it is not changed after), so it is written as is
  /// when it has the slot's dtype, without a copy.
  void assign(int64_t id, const Tensor& t, bool owned = false);
  /// Starts reading slot `id` into RAM, unless it is there or on its way.
  void prefetch(int64_t id);
  /// The slot's values in RAM (waits for the read): a tensor of the slot's shape and dtype
  /// that stays the slot's copy until release().
  Tensor get(int64_t id);
  /// Drops the RAM copy; when `dirty` (or assigned since it was read) it is written back
  /// first (behind, in order). A pinned slot keeps its copy and only remembers it is dirty.
  void release(int64_t id, bool dirty);
  /// Keeps slot `id` in RAM (read now, in the background) until unpin: get and release
  /// cost no IO meanwhile. Placement moves a tensor between the tiers with these two.
  void pin(int64_t id);
  /// Ends a pin: the RAM copy is written behind if it changed, then dropped.
  void unpin(int64_t id);
  bool pinned(int64_t id) const { return slots_.at(size_t(id)).pinned; }
  /// Bytes of slot `id`.
  size_t slot_bytes(int64_t id) const;
  DType slot_dtype(int64_t id) const { return slots_.at(size_t(id)).dtype; }
  const Shape& slot_shape(int64_t id) const { return slots_.at(size_t(id)).shape; }
  /// Waits until every read and write issued so far is done; rethrows an IO error.
  void flush();

  size_t slots() const { return slots_.size(); }
  /// Bytes the store's file holds.
  size_t disk_bytes() const { return file_bytes_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }
  /// The name the store's file goes by in messages (it has none on disk).
  const std::string& path() const { return path_; }

 private:
  struct Slot {
    uint64_t offset;
    Shape shape;
    DType dtype;
    Tensor ram;                  // the RAM copy, when present or being read
    std::shared_future<void> ready;
    bool pinned = false;         // the RAM copy stays until unpin
    bool dirty = false;          // the RAM copy differs from the file
  };
  std::shared_future<void> enqueue(std::function<void()> io);
  void worker();
  void pread_all(void* dst, size_t n, uint64_t off);
  void pwrite_all(const void* src, size_t n, uint64_t off);
  /// Writes t to the slot's place behind, within the bounded window.
  void write_behind(const Tensor& t, uint64_t off);

  std::string path_;
  int fd_ = -1;
  std::vector<Slot> slots_;
  size_t file_bytes_ = 0;
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};  // counted by the worker
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  std::vector<std::shared_future<void>> pending_;
  std::deque<std::pair<std::shared_future<void>, size_t>> writes_;  // in flight, oldest first
  size_t max_inflight_, inflight_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace booster
