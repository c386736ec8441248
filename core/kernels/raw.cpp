// Raw in-place kernels and whole-tensor statistics (no autograd).
#include "core/kernels/raw.h"

#include <cmath>

#include "core/kernels/op_util.h"

namespace booster::kernels {

void add_(Tensor& dst, const Tensor& src) {
  BOOSTER_CHECK_T(ShapeError, dst.shape() == src.shape(), "add_: shape mismatch ", shape_str(dst.shape()), " vs ",
                  shape_str(src.shape()));
  BOOSTER_CHECK(dst.is_contiguous(), "add_: destination must be contiguous");
  if (dst.dtype() == DType::f32) {
    Tensor s = f32_contig(src);
    float* d = dst.data<float>();
    const float* p = s.data<float>();
    parallel_for(dst.numel(), kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) d[i] += p[i];
    });
    return;
  }
  Tensor sum = f32_copy(dst);
  add_(sum, src);
  dst.copy_(sum);
}

void scale_(Tensor& dst, double s) {
  BOOSTER_CHECK(dst.is_contiguous(), "scale_: destination must be contiguous");
  if (dst.dtype() == DType::f32) {
    float* d = dst.data<float>();
    const float f = float(s);
    parallel_for(dst.numel(), kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) d[i] *= f;
    });
    return;
  }
  Tensor t = f32_copy(dst);
  scale_(t, s);
  dst.copy_(t);
}

double sum_squares(const Tensor& t) {
  Tensor s = f32_contig(t);
  const float* p = s.data<float>();
  const int64_t n = s.numel();
  double acc = 0;
#pragma omp parallel for reduction(+ : acc) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) acc += double(p[i]) * p[i];
  return acc;
}

bool all_finite(const Tensor& t) {
  Tensor s = f32_contig(t);
  const float* p = s.data<float>();
  const int64_t n = s.numel();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(p[i]);
  return !bad;
}

}  // namespace booster::kernels
