// Which implementation ops run: the fast path (oneDNN, vectorized loops) or the plain
// reference loops kept as a test oracle. Thread-local; tests flip it with ReferenceGuard.
#pragma once

namespace booster::kernels {

/// True while a ReferenceGuard is alive on this thread.
bool use_reference();

/// Routes every op on this thread through the reference loops for its lifetime.
class ReferenceGuard {
 public:
  ReferenceGuard();
  ~ReferenceGuard();
  ReferenceGuard(const ReferenceGuard&) = delete;
  ReferenceGuard& operator=(const ReferenceGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace booster::kernels
