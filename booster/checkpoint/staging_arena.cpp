// StagingArena (see staging_arena.h).
#include "booster/checkpoint/staging_arena.h"

#include <sys/mman.h>

#include "core/autograd/grad_mode.h"
#include "core/common/check.h"

namespace booster::ckpt {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

StagingArena::~StagingArena() {
  if (base_) ::munmap(base_, capacity_);
}

void StagingArena::begin(size_t bytes) {
  used_ = 0;
  if (bytes <= capacity_) return;
  if (base_) ::munmap(base_, capacity_);
  base_ = nullptr;
  capacity_ = 0;
  const size_t want = round_up(bytes, kHugePage);
  void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  BOOSTER_CHECK_T(BackendError, p != MAP_FAILED, "asynchronous save: cannot map ", want >> 20,
                  " MB of staging memory (BOOSTER_ASYNC_STAGING_MB bounds it)");
  ::madvise(p, want, MADV_HUGEPAGE);  // advice only: without huge pages the copy faults 4 kB pages
  base_ = p;
  capacity_ = want;
}

Tensor StagingArena::stage(const Tensor& src) {
  const size_t bytes = slot_bytes(size_t(src.numel()) * dtype_size(src.dtype()));
  BOOSTER_CHECK(used_ + bytes <= capacity_, "asynchronous save: staging ", bytes, " bytes at ", used_,
                " overruns the arena's ", capacity_, " bytes (begin() was given less than the snapshot)");
  Tensor copy = Tensor::from_blob(static_cast<char*>(base_) + used_, src.shape(), src.dtype());
  used_ += bytes;
  NoGradGuard ng;
  copy.copy_(src);
  return copy;
}

}  // namespace booster::ckpt
