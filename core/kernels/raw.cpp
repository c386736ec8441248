// Raw in-place kernels and whole-tensor statistics (no autograd).
#include "core/kernels/raw.h"

#include <algorithm>
#include <atomic>
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
bool exponents_finite(const void* data, int64_t lo, int64_t hi, U exponent) {
  const U* p = static_cast<const U*>(data);
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = lo; i < hi; ++i) bad |= (p[i] & exponent) == exponent;
  return !bad;
}

// Elements [lo, hi) of a contiguous float tensor finite (integers always are).
bool range_finite(const Tensor& t, int64_t lo, int64_t hi) {
  switch (t.dtype()) {
    case DType::f32: return exponents_finite(t.raw_data(), lo, hi, uint32_t(0x7f800000u));
    case DType::bf16: return exponents_finite(t.raw_data(), lo, hi, uint16_t(0x7f80u));
    case DType::f16: return exponents_finite(t.raw_data(), lo, hi, uint16_t(0x7c00u));
    default: return true;
  }
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

bool all_finite(const Tensor& t) { return all_finite(std::vector<Tensor>{t}); }

bool all_finite(const std::vector<Tensor>& ts) {
  // The tensors' elements as one range that the threads split evenly (one parallel region
  // for all of a model's gradients, not one per tensor).
  std::vector<Tensor> parts;
  std::vector<int64_t> starts{0};
  for (const Tensor& t : ts) {
    if (!t.defined() || t.numel() == 0) continue;
    parts.push_back(t.contiguous());
    starts.push_back(starts.back() + t.numel());
  }
  std::atomic<bool> bad{false};
  parallel_for(starts.back(), kGrain, [&](int64_t b, int64_t e) {
    size_t i = size_t(std::upper_bound(starts.begin(), starts.end(), b) - starts.begin()) - 1;
    for (; b < e && !bad.load(std::memory_order_relaxed); ++i) {
      const int64_t end = std::min(e, starts[i + 1]);
      if (!range_finite(parts[i], b - starts[i], end - starts[i])) bad = true;
      b = end;
    }
  });
  return !bad;
}

}  // namespace booster::kernels
