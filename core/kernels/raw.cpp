// Raw in-place kernels and whole-tensor statistics (no autograd).
#include "core/kernels/raw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

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
  if (add_low_precision_(dst, src)) return;  // no f32 copies of either
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

namespace {

// Blocks of at most this many elements are widened to f32 on the stack before summing.
constexpr int64_t kWiden = 256;

// Sum of squares of n elements of T, widened kWiden at a time (a vector loop per block).
template <typename T>
double sum_squares_of(const T* p, int64_t n) {
  double acc = 0;
#pragma omp parallel for reduction(+ : acc) if (n > kGrain) schedule(static)
  for (int64_t b = 0; b < n; b += kWiden) {
    const int64_t e = std::min(n, b + kWiden);
    float w[kWiden];
    for (int64_t i = b; i < e; ++i) {
      if constexpr (std::is_same_v<T, float>) w[i - b] = p[i];
      else if constexpr (std::is_same_v<T, bf16_t>) w[i - b] = from_bf16(p[i]);
      else w[i - b] = from_f16(p[i]);
    }
    double part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t i = 0; i < e - b; ++i) part += double(w[i]) * w[i];
    acc += part;
  }
  return acc;
}

// True when no element of n has its exponent bits all set (inf or NaN), read as the
// integers U under `exponent`'s mask: no conversion, one vector pass.
template <typename U>
bool exponents_finite(const U* p, int64_t n, U exponent) {
  int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad |= (p[i] & exponent) == exponent;
  return !bad;
}

}  // namespace

double sum_squares(const Tensor& t) {
  const Tensor s = t.contiguous();
  switch (s.dtype()) {
    case DType::f32: return sum_squares_of(s.data<float>(), s.numel());
    case DType::bf16: return sum_squares_of(s.data<bf16_t>(), s.numel());
    case DType::f16: return sum_squares_of(s.data<f16_t>(), s.numel());
    default: break;
  }
  const Tensor f = f32_contig(s);
  return sum_squares_of(f.data<float>(), f.numel());
}

bool all_finite(const Tensor& t) {
  const Tensor s = t.contiguous();
  switch (s.dtype()) {
    case DType::f32: return exponents_finite(static_cast<const uint32_t*>(s.raw_data()), s.numel(), uint32_t(0x7f800000u));
    case DType::bf16: return exponents_finite(static_cast<const uint16_t*>(s.raw_data()), s.numel(), uint16_t(0x7f80u));
    case DType::f16: return exponents_finite(static_cast<const uint16_t*>(s.raw_data()), s.numel(), uint16_t(0x7c00u));
    default: return true;  // integers are always finite
  }
}

}  // namespace booster::kernels
