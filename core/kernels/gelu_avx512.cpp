// Exact (erf) GELU and its derivative in one pass, on AVX-512 (gelu_avx512.h).
//
// erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7) on |x| / sqrt(2), whose
// exp(-x^2 / 2) is also the normal density the derivative needs: one exponential gives
// both, as 2^(-z^2 log2 e) (exp2_nonpositive, avx512_math.h: degree 5 for f32 results).
// Against double precision over [-10, 10]: y and y' within 3e-7 (relative past 1).
// Measured on [1576, 3072] f32 (ViT-B's MLP at batch 8, 2 threads, Zen-5 class): 0.9 ms for
// y and y' together; oneDNN's eltwise took 2.0 ms for y and 3.4 ms for its backward.
//
// bf16 results (rounded to 2^-9 relative) take vrcp14ps for the division and the degree-4
// exp2_nonpositive (errors of 6e-5 and 3.5e-6 relative). The pass is bound by the FP pipes:
// core_bench BM_Gelu forward, 3 runs alternated each time: bf16 with the exact division and
// Cephes' exp (degree 6 after range reduction by ln 2) 1.51-1.57 ms, with vrcp14ps and 2^f
// with a rounded 2^n 1.21-1.23, with exp2_nonpositive 1.09-1.12; f32 (exact division) with
// Cephes' exp 1.28-1.29, with exp2_nonpositive 1.05-1.12.
#include "core/kernels/gelu_avx512.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors (_mm512_undefined_*) as
// maybe uninitialized once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <type_traits>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"

namespace booster::kernels {
namespace {

using avx512::load16;
using avx512::narrow16;
using avx512::store16;

// y = x Phi(x), d = Phi(x) + x phi(x) for 16 lanes. Fast (for bf16 results): 1 / (1 + p z)
// by vrcp14ps (2^-14 relative) and exp2_nonpositive<4>, errors far below bf16's rounding.
template <bool Fast>
BOOSTER_AVX512 inline void gelu16(__m512 x, __m512& y, __m512& d) {
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  const __m512 den = _mm512_fmadd_ps(z, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f));
  const __m512 t = Fast ? _mm512_rcp14_ps(den) : _mm512_div_ps(_mm512_set1_ps(1.0f), den);
  // exp(-x^2 / 2) = exp(-z^2) = 2^u, u = -z^2 log2(e)
  const __m512 u = _mm512_mul_ps(_mm512_mul_ps(z, _mm512_set1_ps(-avx512::kLog2e)), z);
  const __m512 e = avx512::exp2_nonpositive<Fast ? 4 : 5>(u);
  __m512 poly = _mm512_set1_ps(1.061405429f);
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  const __m512 erf_abs = _mm512_fnmadd_ps(_mm512_mul_ps(poly, t), e, _mm512_set1_ps(1.0f));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int32_t(0x80000000u)));
  const __m512 erf = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(erf_abs), sign));
  const __m512 cdf = _mm512_fmadd_ps(erf, _mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  y = _mm512_mul_ps(x, cdf);
  d = _mm512_fmadd_ps(_mm512_mul_ps(x, e), _mm512_set1_ps(0.39894228040143268f), cdf);  // 1 / sqrt(2 pi)
}

// The pass over n elements, stamped out once per instruction set: NARROW turns 16 f32 lanes
// into bf16 (unused for f32). Full vectors load and store unmasked (masked stores are slow
// on AMD's AVX-512: the masked form took twice as long on a Zen-5 class CPU); the tail is
// masked. y' goes past the caches (streamed; the backward reads it much later). FAST: gelu16's
// form for bf16 results.
#define BOOSTER_GELU_PASS(CONVERT, FAST)                                                          \
  const bool aligned = reinterpret_cast<uintptr_t>(d) % 64 == 0;                                  \
  int64_t i = 0;                                                                                  \
  for (; i + 16 <= n; i += 16) {                                                                  \
    __m512 yv, dv;                                                                                \
    gelu16<FAST>(load16(x + i), yv, dv);                                                          \
    put(y + i, CONVERT(y, yv));                                                                   \
    if (aligned) stream(d + i, CONVERT(d, dv));                                                   \
    else put(d + i, CONVERT(d, dv));                                                              \
  }                                                                                               \
  if (i < n) {                                                                                    \
    const __mmask16 m = avx512::lanes(n - i);                                                     \
    __m512 yv, dv;                                                                                \
    gelu16<FAST>(load16(x + i, m), yv, dv);                                                       \
    store16(y + i, m, yv);                                                                        \
    store16(d + i, m, dv);                                                                        \
  }                                                                                               \
  _mm_sfence(); /* the streamed stores are ordered before anything after this pass */

BOOSTER_AVX512 inline __m512 lanes_for(const float*, __m512 v) { return v; }
BOOSTER_AVX512 inline __m256i lanes_for(const bf16_t*, __m512 v) { return narrow16(v); }
BOOSTER_AVX512 inline void put(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
BOOSTER_AVX512 inline void put(bf16_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
BOOSTER_AVX512 inline void stream(float* p, __m512 v) { _mm512_stream_ps(p, v); }
BOOSTER_AVX512 inline void stream(bf16_t* p, __m256i v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }

template <typename T>
BOOSTER_AVX512 void gelu_block(const T* x, T* y, T* d, int64_t n) { BOOSTER_GELU_PASS(lanes_for, (std::is_same_v<T, bf16_t>)) }

// bf16 on CPUs with AVX512-BF16: vcvtneps2bf16 rounds to nearest even and keeps NaNs quiet,
// as narrow16 does, in one instruction (narrow16's shifts and vpmovdw cost the bf16 pass 70 %
// over the f32 one).
BOOSTER_AVX512_BF16 inline __m256i narrow16_native(const bf16_t*, __m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
BOOSTER_AVX512_BF16 void gelu_block_native(const bf16_t* x, bf16_t* y, bf16_t* d, int64_t n) {
  BOOSTER_GELU_PASS(narrow16_native, true)
}

template <typename T>
void gelu_all(const T* x, T* y, T* d, int64_t n, bool native_bf16 = true) {
  constexpr int64_t kBlock = 4096;
  parallel_for((n + kBlock - 1) / kBlock, kGrain / kBlock, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t i = blk * kBlock;
      if constexpr (std::is_same_v<T, bf16_t>) {
        if (native_bf16 && avx512::cpu_bf16_ok()) {
          gelu_block_native(x + i, y + i, d + i, std::min(kBlock, n - i));
          continue;
        }
      }
      gelu_block(x + i, y + i, d + i, std::min(kBlock, n - i));
    }
  });
}

}  // namespace

void gelu_with_grad(const float* x, float* y, float* d, int64_t n) { gelu_all(x, y, d, n); }
void gelu_with_grad(const bf16_t* x, bf16_t* y, bf16_t* d, int64_t n, bool native_bf16) {
  gelu_all(x, y, d, n, native_bf16);
}

}  // namespace booster::kernels
