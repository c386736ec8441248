// LayerNorm on AVX-512 (layer_norm_avx512.h).
//
// oneDNN 2.6 runs LayerNorm here on its "simple" implementation: at ViT-Ti's [1576, 192] its
// backward took 0.34 ms in f32, 3.5 GB/s. Each row here is read once into L1 and worked on
// there: the forward's mean, variance and output, the backward's two row sums and dx; dw and
// db accumulate per thread and are summed in thread order (the same bits for the same thread
// count). bf16 rows round with vcvtneps2bf16 where the CPU has AVX512-BF16 (BOOSTER_LN_ROWS):
// core_bench BM_LayerNorm, 2 threads, Zen-5 class, 4 runs alternated with the seven-instruction
// rounding: forward [8, 197, 768] 151-158 us against 174-196, ViT-Ti's [8, 197, 192] 47-48
// against 67-70; forward + backward 324-403 against 380-465 and 112-142 against 161-200.
//
// A row's sums (mean, variance; the backward's two) go to four accumulators, not one chain of
// dependent adds that bound the rows (perf: the chained vaddps / vfmadd took 38 % of the
// forward). BM_LayerNorm, 3 runs alternated with one accumulator: forward [8, 197, 768] f32
// 129-131 -> 104-106 us, bf16 155-157 -> 125-127; [8, 197, 192] f32 38-39 -> 35-37, bf16 56-57
// -> 52-54; forward + backward bf16 [8, 197, 768] 330-333 -> 300-318, the rest within noise.
#include "core/kernels/layer_norm_avx512.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"

namespace booster::kernels {
namespace {

using avx512::load16;
using avx512::store16;

BOOSTER_AVX512 inline __m512 load_or(const float* p, __mmask16 m, float dflt) {
  return p ? _mm512_mask_loadu_ps(_mm512_set1_ps(dflt), m, p) : _mm512_set1_ps(dflt);
}

// Runs the statements over a row of c in vectors of 16: j the offset, m its lanes (the last
// vector masked), k = j / 16 % 4 for the full vectors of a run of four (0 past them): the
// row sums go to four accumulators (acc[k], kept in registers), not one chain of dependent
// adds. A macro: a lambda would not inherit the AVX-512 target.
#define BOOSTER_OVER_ROW(c, ...)                                                 \
  {                                                                              \
    int64_t j0 = 0;                                                              \
    for (; j0 + 64 <= (c); j0 += 64) {                                           \
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {                      \
        const int64_t j = j0 + 16 * k;                                           \
        const __mmask16 m = 0xffff;                                              \
        __VA_ARGS__                                                              \
      }                                                                          \
    }                                                                            \
    for (int64_t j = j0; j < (c); j += 16) {                                     \
      [[maybe_unused]] constexpr int k = 0;                                      \
      const __mmask16 m = (c) - j >= 16 ? __mmask16(0xffff) : avx512::lanes((c) - j); \
      __VA_ARGS__                                                                \
    }                                                                            \
  }
// The sum of four accumulators' lanes.
BOOSTER_AVX512 inline float reduce4(const __m512 a[4]) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}
#define BOOSTER_ZERO4(a) \
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}

// The row kernels, stamped out once per instruction set (TARGET) with its bf16 store (STORE):
// on AVX512-BF16 CPUs bf16 rows are rounded in one instruction (store16_native) where
// store16 takes seven, which made the bf16 rows slower than the f32 ones (at half the bytes).
#define BOOSTER_LN_ROWS(TARGET, STORE)                                                                                 \
template <typename T>                                                                                                  \
TARGET void fwd_rows(const T* x, const float* w, const float* b, T* y, float* mean, float* rstd, int64_t r0,           \
                     int64_t r1, int64_t c, float eps) {                                                               \
  const float inv_c = 1.0f / float(c);                                                                                 \
  for (int64_t r = r0; r < r1; ++r) {                                                                                  \
    const T* xr = x + r * c;                                                                                           \
    BOOSTER_ZERO4(s);                                                                                                  \
    BOOSTER_OVER_ROW(c, s[k] = _mm512_add_ps(s[k], load16(xr + j, m));)                                                \
    const float mu = reduce4(s) * inv_c;                                                                               \
    const __m512 vmu = _mm512_set1_ps(mu);                                                                             \
    BOOSTER_ZERO4(q);                                                                                                  \
    BOOSTER_OVER_ROW(c,                                                                                                \
      const __m512 d = _mm512_maskz_sub_ps(m, load16(xr + j, m), vmu);                                                 \
      q[k] = _mm512_fmadd_ps(d, d, q[k]);                                                                              \
    )                                                                                                                  \
    const float rs = 1.0f / std::sqrt(reduce4(q) * inv_c + eps);                                                       \
    const __m512 vrs = _mm512_set1_ps(rs);                                                                             \
    T* yr = y + r * c;                                                                                                 \
    BOOSTER_OVER_ROW(c,                                                                                                \
      const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(load16(xr + j, m), vmu), vrs);                                     \
      const __m512 v = _mm512_fmadd_ps(xh, load_or(w ? w + j : nullptr, m, 1.0f), load_or(b ? b + j : nullptr, m, 0.0f)); \
      if (m == 0xffff) STORE(yr + j, v);                                                                               \
      else STORE(yr + j, m, v);                                                                                        \
    )                                                                                                                  \
    mean[r] = mu;                                                                                                      \
    rstd[r] = rs;                                                                                                      \
  }                                                                                                                    \
}                                                                                                                      \
                                                                                                                       \
template <typename T>                                                                                                  \
TARGET void bwd_rows(const T* x, const float* w, const float* mean, const float* rstd, const T* dy, T* dx,             \
                     float* dw, float* db, int64_t r0, int64_t r1, int64_t c) {                                        \
  const float inv_c = 1.0f / float(c);                                                                                 \
  for (int64_t r = r0; r < r1; ++r) {                                                                                  \
    const T *xr = x + r * c, *gr = dy + r * c;                                                                         \
    const __m512 vmu = _mm512_set1_ps(mean[r]), vrs = _mm512_set1_ps(rstd[r]);                                         \
    BOOSTER_ZERO4(sg);                                                                                                 \
    BOOSTER_ZERO4(sgx);                                                                                                \
    BOOSTER_OVER_ROW(c,                                                                                                \
      const __m512 xh = _mm512_maskz_mul_ps(m, _mm512_sub_ps(load16(xr + j, m), vmu), vrs);                            \
      const __m512 g = load16(gr + j, m);                                                                              \
      const __m512 gi = _mm512_mul_ps(g, load_or(w ? w + j : nullptr, m, 1.0f));                                       \
      sg[k] = _mm512_add_ps(sg[k], gi);                                                                                \
      sgx[k] = _mm512_fmadd_ps(gi, xh, sgx[k]);                                                                        \
      if (dw) {                                                                                                        \
        _mm512_mask_storeu_ps(dw + j, m, _mm512_fmadd_ps(g, xh, _mm512_maskz_loadu_ps(m, dw + j)));                    \
        _mm512_mask_storeu_ps(db + j, m, _mm512_add_ps(g, _mm512_maskz_loadu_ps(m, db + j)));                          \
      }                                                                                                                \
    )                                                                                                                  \
    const __m512 mg = _mm512_set1_ps(reduce4(sg) * inv_c), mgx = _mm512_set1_ps(reduce4(sgx) * inv_c);                 \
    T* dr = dx + r * c;                                                                                                \
    BOOSTER_OVER_ROW(c,                                                                                                \
      const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(load16(xr + j, m), vmu), vrs);                                     \
      const __m512 gi = _mm512_mul_ps(load16(gr + j, m), load_or(w ? w + j : nullptr, m, 1.0f));                       \
      const __m512 v = _mm512_mul_ps(vrs, _mm512_sub_ps(_mm512_sub_ps(gi, mg), _mm512_mul_ps(xh, mgx)));               \
      if (m == 0xffff) STORE(dr + j, v);                                                                               \
      else STORE(dr + j, m, v);                                                                                        \
    )                                                                                                                  \
  }                                                                                                                    \
}
namespace emulated {
BOOSTER_LN_ROWS(BOOSTER_AVX512, store16)
}
namespace native {
BOOSTER_LN_ROWS(BOOSTER_AVX512_BF16, avx512::store16_native)
}
#undef BOOSTER_LN_ROWS

// bf16 storage on a CPU with AVX512-BF16: the native rows.
template <typename T>
bool native_bf16() {
  return std::is_same_v<T, bf16_t> && avx512::cpu_bf16_ok();
}

// Rows split across threads in contiguous runs (below ~32K elements, one thread).
int threads_for(int64_t rows, int64_t c) {
  return rows * c <= kGrain || omp_in_parallel() ? 1 : int(std::min<int64_t>(omp_get_max_threads(), rows));
}

template <typename T>
void fwd_all(const T* x, const float* w, const float* b, T* y, float* mean, float* rstd, int64_t rows, int64_t c,
             float eps) {
  const auto run = native_bf16<T>() ? &native::fwd_rows<T> : &emulated::fwd_rows<T>;
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(c, 1)),
               [&](int64_t r0, int64_t r1) { run(x, w, b, y, mean, rstd, r0, r1, c, eps); });
}

template <typename T>
void bwd_all(const T* x, const float* w, const float* mean, const float* rstd, const T* dy, T* dx, float* dw, float* db,
             int64_t rows, int64_t c) {
  const int nt = threads_for(rows, c);
  const auto run = native_bf16<T>() ? &native::bwd_rows<T> : &emulated::bwd_rows<T>;
  // Per-thread dw and db (zeroed), summed in thread order after; each on a 64-byte boundary,
  // as every row adds a vector to each (from malloc, at 16 bytes, they straddle cache lines:
  // the f32 ViT-Ti step's backward 0.349 / 0.235 / 0.354 / 0.350 / 0.356 -> 0.336 / 0.211 /
  // 0.335 / 0.334 / 0.330 ms a call, the two ways interleaved in each of 5 runs).
  const int64_t cp = (c + 15) / 16 * 16;
  Tensor part_t = dw ? Tensor::zeros({2 * nt * cp}) : Tensor();
  float* part = dw ? part_t.data<float>() : nullptr;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads(), chunk = (rows + n - 1) / n;
    const int64_t r0 = std::min(rows, t * chunk), r1 = std::min(rows, r0 + chunk);
    float* pw = dw ? part + 2 * t * cp : nullptr;
    float* pb = dw ? pw + cp : nullptr;
    if (r0 < r1) run(x, w, mean, rstd, dy, dx, pw, pb, r0, r1, c);
  }
  if (!dw) return;
  for (int64_t i = 0; i < c; ++i) {
    float sw = 0, sb = 0;
    for (int t = 0; t < nt; ++t) {
      sw += part[2 * t * cp + i];
      sb += part[2 * t * cp + cp + i];
    }
    dw[i] = sw;
    db[i] = sb;
  }
}

}  // namespace

void layer_norm_fwd_avx512(const Tensor& x2, const float* w, const float* b, const Tensor& y, float* mean, float* rstd,
                           float eps) {
  const int64_t rows = x2.size(0), c = x2.size(1);
  if (x2.dtype() == DType::f32) fwd_all(x2.data<float>(), w, b, y.data<float>(), mean, rstd, rows, c, eps);
  else fwd_all(x2.data<bf16_t>(), w, b, y.data<bf16_t>(), mean, rstd, rows, c, eps);
}

void layer_norm_bwd_avx512(const Tensor& x2, const float* w, const float* mean, const float* rstd, const Tensor& dy,
                           const Tensor& dx, float* dw, float* db) {
  const int64_t rows = x2.size(0), c = x2.size(1);
  if (x2.dtype() == DType::f32)
    bwd_all(x2.data<float>(), w, mean, rstd, dy.data<float>(), dx.data<float>(), dw, db, rows, c);
  else bwd_all(x2.data<bf16_t>(), w, mean, rstd, dy.data<bf16_t>(), dx.data<bf16_t>(), dw, db, rows, c);
}

}  // namespace booster::kernels
