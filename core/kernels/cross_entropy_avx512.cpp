// Cross entropy rows on AVX-512 (see cross_entropy_avx512.h).
#include "core/kernels/cross_entropy_avx512.h"

#include <cmath>
#include <cstring>

#include "core/kernels/avx512_math.h"
#include "core/common/parallel.h"

namespace booster::kernels {

namespace {

using namespace avx512;

// One row; returns its loss. e = 2^((x - max) log2 e) by exp2_nonpositive (degree 5: 1.8e-7
// relative), summed in 16 f32 lanes.
BOOSTER_AVX512 float row(const float* x, float* g, int64_t c, int64_t t, float off, float on_extra, double qsum,
                         bool smoothed) {
  const int64_t full = c / 16 * 16;
  const __mmask16 tail = lanes(c - full);
  const float xt = x[t];  // read before g is written: g may be x
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < full; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + j));
  if (tail) vm = _mm512_mask_max_ps(vm, tail, vm, _mm512_maskz_loadu_ps(tail, x + full));
  const float mx = _mm512_reduce_max_ps(vm);
  const __m512 m = _mm512_set1_ps(mx), l2e = _mm512_set1_ps(kLog2e);
  __m512 vs = _mm512_setzero_ps(), vx = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 xv = _mm512_loadu_ps(x + j);
    const __m512 e = exp2_nonpositive<5>(_mm512_mul_ps(_mm512_sub_ps(xv, m), l2e));
    _mm512_storeu_ps(g + j, e);
    vs = _mm512_add_ps(vs, e);
    if (smoothed) vx = _mm512_add_ps(vx, xv);
  }
  if (tail) {
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + full);
    const __m512 e = _mm512_maskz_mov_ps(tail, exp2_nonpositive<5>(_mm512_mul_ps(_mm512_sub_ps(xv, m), l2e)));
    _mm512_mask_storeu_ps(g + full, tail, e);
    vs = _mm512_add_ps(vs, e);
    if (smoothed) vx = _mm512_add_ps(vx, xv);
  }
  const double s = _mm512_reduce_add_ps(vs), lse = double(mx) + std::log(s);
  const __m512 k = _mm512_set1_ps(float(qsum / s)), o = _mm512_set1_ps(off);
  for (int64_t j = 0; j < full; j += 16) _mm512_storeu_ps(g + j, _mm512_fmsub_ps(_mm512_loadu_ps(g + j), k, o));
  if (tail) _mm512_mask_storeu_ps(g + full, tail, _mm512_fmsub_ps(_mm512_maskz_loadu_ps(tail, g + full), k, o));
  g[t] -= on_extra;
  // sum_j q_j (lse - x_j) = sum(q) lse - (1 - smoothing) x_t - (smoothing / c) sum_j x_j
  const double xsum = smoothed ? double(_mm512_reduce_add_ps(vx)) : 0.0;
  return float(qsum * lse - double(on_extra) * xt - double(off) * xsum);
}

}  // namespace

int64_t cross_entropy_rows(const float* x, float* grad, const int64_t* target, float* loss, int64_t n, int64_t c,
                           double smoothing, int64_t ignore_index) {
  const float off = float(smoothing / double(c)), on_extra = float(1.0 - smoothing);
  const double qsum = double(on_extra) + double(off) * double(c);  // sum of the row's q as the old path rounds q
  int64_t counted = 0;
#pragma omp parallel for schedule(static) reduction(+ : counted) if (n * c > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) {
      std::memset(grad + i * c, 0, size_t(c) * sizeof(float));
      loss[i] = 0.f;
      continue;
    }
    loss[i] = row(x + i * c, grad + i * c, c, target[i], off, on_extra, qsum, smoothing > 0);
    ++counted;
  }
  return counted;
}

}  // namespace booster::kernels
