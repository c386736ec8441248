// Small helpers shared by the op files: argument checks and f32 staging.
#pragma once

#include <initializer_list>

#include "core/kernels/dispatch.h"
#include "core/tensor/tensor.h"

namespace booster::kernels {

/// Throws DTypeError unless every defined tensor has the dtype of the first.
void check_same_dtype(const char* op, std::initializer_list<const Tensor*> ts);
/// Throws DTypeError unless t is f32, bf16 or f16.
void check_floating(const char* op, const Tensor& t);
/// A contiguous copy of t in `dtype` without history (t itself when already so).
Tensor contig_as(const Tensor& t, DType dtype);
/// A contiguous f32 copy of t without history (t itself when already so).
inline Tensor f32_contig(const Tensor& t) { return contig_as(t, DType::f32); }
/// A new contiguous f32 tensor holding t's values (never t's storage): for in-place work.
Tensor f32_copy(const Tensor& t);
/// Wraps a negative dim index; throws ShapeError naming op.
int64_t wrap_dim(const char* op, int64_t d, int64_t ndim);

}  // namespace booster::kernels

#include <omp.h>

namespace booster::kernels {

/// Runs f(begin, end) over [0, n) split across OpenMP threads; inline below `grain`
/// elements so tiny tensors pay no thread start-up.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= grain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

/// Elements below which elementwise loops stay on one thread.
constexpr int64_t kGrain = 1 << 15;

}  // namespace booster::kernels
