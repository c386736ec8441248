// The oneDNN matmul ceiling: one raw matmul [M, K] x [K, N] with weights in oneDNN's
// preferred (packed) layout, as ../shared/bench/dnnl_peak.cpp measures it. Buffers are
// filled with values (never-written pages would flatter the figure).
#pragma once

#include <dnnl.hpp>
#include <string>

#include "core/tensor/tensor.h"

namespace booster::bench {

class RawMatmul {
 public:
  RawMatmul(int64_t m, int64_t k, int64_t n, DType dt);
  /// False when oneDNN has no kernel for this dtype on this CPU.
  bool ok() const { return ok_; }
  /// oneDNN's implementation name.
  std::string impl() const;
  /// Seconds of one execution.
  double run_seconds();
  /// GFLOP/s of the fastest of `reps` executions (after one to warm up): a ceiling is what
  /// the machine can do, and a shared machine only ever slows an execution down.
  double gflops(int reps = 5);

 private:
  bool ok_ = false;
  int64_t m_, k_, n_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::primitive prim_;
  dnnl::memory b_mem_;
  Tensor a_, c_;
};

}  // namespace booster::bench
