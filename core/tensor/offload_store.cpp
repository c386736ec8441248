// The file-backed offload store (see offload_store.h).
#include "core/tensor/offload_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace booster {

namespace {
class DiskTier : public MemoryTier {
 public:
  DiskTier() : MemoryTier("disk") {}
  void* allocate(size_t) override { BOOSTER_THROW(ValueError, "the disk tier only counts offloaded bytes"); }
  void deallocate(void*, size_t) override {}
  void add(size_t n) { account_alloc(n); }
  void remove(size_t n) { account_free(n); }
};
std::atomic<uint64_t> g_store_counter{0};
}  // namespace

namespace {
std::mutex g_default_dir_mu;
std::string g_default_dir;
}  // namespace

std::string default_offload_dir() {
  std::lock_guard<std::mutex> lk(g_default_dir_mu);
  return g_default_dir.empty() ? std::filesystem::temp_directory_path().string() : g_default_dir;
}

void set_default_offload_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lk(g_default_dir_mu);
  g_default_dir = dir;
}

MemoryTier& disk_tier() {
  static MemoryTier& t = register_tier(std::make_unique<DiskTier>());
  return t;
}

OffloadStore::OffloadStore(const std::string& dir, size_t max_inflight_writes) : max_inflight_(max_inflight_writes) {
  const std::filesystem::path d = dir.empty() ? default_offload_dir() : dir;
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  // The file has no name while the store uses it (O_TMPFILE; where the file system lacks it,
  // a named file unlinked at once), so it is gone however the process ends: a SIGKILL, an
  // abort, a full disk or an error leaves nothing behind. The descriptor keeps it.
  fd_ = ::open(d.c_str(), O_RDWR | O_TMPFILE | O_EXCL, 0600);
  path_ = (d / ("booster-offload-" + std::to_string(::getpid()) + "-" + std::to_string(g_store_counter++) + ".bin")).string();
  if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ >= 0) ::unlink(path_.c_str());
  }
  BOOSTER_CHECK_T(IOError, fd_ >= 0, "offload store: cannot create a file in '", d.string(), "': ", std::strerror(errno),
                  " (set the offload folder to a writable local disk)");
  disk_tier();
  thread_ = std::thread([this] { worker(); });
}

OffloadStore::~OffloadStore() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ::close(fd_);  // the file had no name: closing frees its blocks
  static_cast<DiskTier&>(disk_tier()).remove(file_bytes_);
}

void OffloadStore::worker() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // an IO error is kept in the task's future
  }
}

std::shared_future<void> OffloadStore::enqueue(std::function<void()> io) {
  std::packaged_task<void()> task(std::move(io));
  std::shared_future<void> f = task.get_future().share();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  pending_.push_back(f);
  if (pending_.size() > 64) {  // forget finished ones
    std::erase_if(pending_, [](const std::shared_future<void>& p) {
      return p.wait_for(std::chrono::seconds(0)) == std::future_status::ready && (p.get(), true);
    });
  }
  return f;
}

void OffloadStore::pread_all(void* dst, size_t n, uint64_t off) {
  char* c = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, c, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    BOOSTER_CHECK_T(IOError, r > 0, "offload store: reading '", path_, "' failed: ", r < 0 ? std::strerror(errno) : "short file");
    c += r, n -= size_t(r), off += uint64_t(r), bytes_read_ += uint64_t(r);
  }
}

void OffloadStore::pwrite_all(const void* src, size_t n, uint64_t off) {
  const char* c = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, c, n, off_t(off));
    if (w < 0 && errno == EINTR) continue;
    BOOSTER_CHECK_T(IOError, w > 0, "offload store: writing '", path_, "' failed: ", std::strerror(errno),
                    " (is the offload folder's disk full?)");
    c += w, n -= size_t(w), off += uint64_t(w), bytes_written_ += uint64_t(w);
  }
}

int64_t OffloadStore::reserve(const Shape& shape, DType dtype) {
  const uint64_t off = file_bytes_;
  file_bytes_ += (size_t(shape_numel(shape)) * dtype_size(dtype) + kAlignment - 1) / kAlignment * kAlignment;
  static_cast<DiskTier&>(disk_tier()).add(file_bytes_ - off);
  slots_.push_back({off, shape, dtype, Tensor(), {}});
  return int64_t(slots_.size()) - 1;
}

int64_t OffloadStore::put(const Tensor& t, bool pinned) {
  Tensor copy = t.detach().contiguous().clone();
  const int64_t id = reserve(copy.shape(), copy.dtype());
  Slot& s = slots_.back();
  if (pinned) {  // stays in RAM; the file gets it when unpinned
    std::promise<void> done;
    done.set_value();
    s.ram = copy;
    s.ready = done.get_future().share();
    s.pinned = s.dirty = true;
  } else {
    write_behind(copy, s.offset);  // within the bounded window: a burst of new slots waits for the disk
  }
  return id;
}

void OffloadStore::assign(int64_t id, const Tensor& t, bool owned) {
  Slot& s = slots_.at(size_t(id));
  BOOSTER_CHECK_T(ShapeError, t.numel() == shape_numel(s.shape), "offload store: assigning ", t.numel(),
                  " elements to a slot of ", shape_numel(s.shape));
  Tensor src = t.detach().contiguous().view(s.shape);
  if (s.ram.defined()) {
    s.ready.get();
    s.ram.copy_(src);
    s.dirty = true;
    return;
  }
  if (src.dtype() != s.dtype) write_behind(src.to(s.dtype).contiguous(), s.offset);  // a converted copy
  else write_behind(owned ? src : src.clone(), s.offset);  // a copy of its own unless t is given up
}

size_t OffloadStore::slot_bytes(int64_t id) const {
  const Slot& s = slots_.at(size_t(id));
  return size_t(shape_numel(s.shape)) * dtype_size(s.dtype);
}

void OffloadStore::pin(int64_t id) {
  slots_.at(size_t(id)).pinned = true;
  prefetch(id);
}

void OffloadStore::unpin(int64_t id) {
  Slot& s = slots_.at(size_t(id));
  if (!s.pinned) return;
  s.pinned = false;
  release(id, false);
}

void OffloadStore::prefetch(int64_t id) {
  Slot& s = slots_.at(size_t(id));
  if (s.ram.defined()) return;
  s.ram = Tensor::empty(s.shape, s.dtype);
  Tensor dst = s.ram;
  const uint64_t off = s.offset;
  s.ready = enqueue([this, dst, off]() mutable {
    pread_all(dst.raw_data(), dst.nbytes(), off);
    dst = Tensor();
  });
}

Tensor OffloadStore::get(int64_t id) {
  prefetch(id);
  Slot& s = slots_.at(size_t(id));
  s.ready.get();
  return s.ram;
}

void OffloadStore::release(int64_t id, bool dirty) {
  Slot& s = slots_.at(size_t(id));
  if (!s.ram.defined()) return;
  s.dirty = s.dirty || dirty;
  if (s.pinned) return;
  if (s.dirty) {
    s.ready.get();  // never write back a copy still being read
    write_behind(s.ram, s.offset);
  }
  s.ram = Tensor();
  s.ready = {};
  s.dirty = false;
}

void OffloadStore::write_behind(const Tensor& t, uint64_t off) {
  Tensor src = t;
  const size_t n = src.nbytes();
  writes_.emplace_back(enqueue([this, src, off]() mutable {
                         pwrite_all(src.raw_data(), src.nbytes(), off);
                         src = Tensor();
                       }),
                       n);
  inflight_ += n;
  while (inflight_ > max_inflight_ && !writes_.empty()) {  // bound the RAM waiting to be written
    writes_.front().first.get();
    inflight_ -= writes_.front().second;
    writes_.pop_front();
  }
}

void OffloadStore::flush() {
  writes_.clear();
  inflight_ = 0;
  auto all = std::move(pending_);
  pending_.clear();
  for (auto& f : all) f.get();
}

}  // namespace booster
