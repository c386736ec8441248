// AVX-512 building blocks shared by the hand-written kernels (GELU, attention, LayerNorm,
// transposed copies, blocked packing): 2^t on non-positive arguments, bf16 widening and
// rounding, a 16 x 16 transpose, bf16 pairs, loads and stores of 16 lanes. Only for translation
// units whose callers check the CPU at run time; every function carries its target.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/common/dtype.h"
#include "core/kernels/avx512_cpu.h"

#define BOOSTER_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define BOOSTER_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

namespace booster::kernels::avx512 {

/// The lowest n of 16 lanes (n <= 16): the mask of a row's last, partial vector.
inline __mmask16 lanes(int64_t n) { return __mmask16((1u << n) - 1); }

// 2^t for t <= 0: 2^f for the fraction f = t - floor(t) in [0, 1) (vreduceps) by a polynomial
// interpolating at Chebyshev nodes on [0, 1), scaled by 2^floor(t) (vscalefps floors t
// itself); 0 below -126 and at -inf, NaN kept. Degree 5: 1.8e-7 relative (f32 results),
// degree 4: 3.5e-6 (results rounded to bf16, 3.9e-3). Callers scale their argument by log2(e)
// where it costs nothing (in a product's alpha) or fold it into an operation they need anyway;
// against exp by Cephes' degree 6 after range reduction by ln 2, the former form here, five
// or six operations fewer on a shorter chain.
template <int Degree>
BOOSTER_AVX512 inline __m512 exp2_nonpositive(__m512 t) {
  static_assert(Degree == 4 || Degree == 5);
  const __mmask16 tiny = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_LT_OQ);
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p;
  if constexpr (Degree == 5) {
    p = _mm512_set1_ps(1.8937540008e-3f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.9495908469e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5860336870e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4014182389e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9315451384e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.9999988079e-1f));
  } else {
    p = _mm512_set1_ps(1.3670309447e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.1744997501e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4160435796e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9297289848e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000034571e+0f));
  }
  return _mm512_maskz_scalef_ps(__mmask16(~tiny), p, t);  // p 2^floor(t)
}
constexpr float kLog2e = 1.44269504088896341f;

// f32 -> bf16 rounded to nearest even as to_bf16 does (a NaN stays a quiet NaN).
BOOSTER_AVX512 inline __m256i narrow16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}
BOOSTER_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
BOOSTER_AVX512 inline __m512 load16(const bf16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
BOOSTER_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
BOOSTER_AVX512 inline __m512 load16(const bf16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/// 16 x 16 transpose in registers: r[i] holds row i on entry and column i on return.
BOOSTER_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[4 g + j] now holds, in 128-bit lane l, element j of rows 4 g .. 4 g + 3 at column 4 l + j.
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);       // lanes 0, 2 of rows 0-3 | 0, 2 of rows 4-7
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);   // lanes 1, 3
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);        // column j
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);    // column 8 + j
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);  // column 4 + j
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd); // column 12 + j
  }
}

/// The 32-bit words (x[i], y[i]) of two rows of 32 bf16 each, lower one first, as vdpbf16ps
/// reads pairs: i = 0..15 (high false) or 16..31 (high true).
BOOSTER_AVX512 inline __m512i pair_words(__m512i x, __m512i y, bool high) {
  alignas(64) static const uint16_t lo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                              8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i idx = _mm512_load_si512(lo);
  return _mm512_permutex2var_epi16(x, high ? _mm512_add_epi16(idx, _mm512_set1_epi16(16)) : idx, y);
}
// Prefetches every cache line of [p, p + bytes) into L2 (prefetcht1): the packing and
// transposing passes read rows ahead of use with it where the rows are short pieces of long
// strided ones, a pattern the hardware prefetchers follow poorly.
inline void prefetch_l2(const void* p, int64_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + uintptr_t(bytes);
  for (uintptr_t a = start & ~uintptr_t(63); a < end; a += 64)
    _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T1);
}
// Adds the two bf16 of each word (the lower one first) to 16 f32 sums.
BOOSTER_AVX512 inline void add_pair_values(float* sums, __m512i words) {
  const __m512 lower = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
  const __m512 upper = _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int32_t(0xffff0000u))));
  _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(sums), lower), upper));
}
// dst[p][c] = the word (src[2 p][c], src[2 p + 1][c]) for p < ceil(rows / 2), c < cols: bf16
// rows [rows, cols] (rows at ld) paired down their columns as vdpbf16ps reads a B operand, or
// an A operand read down its columns; a missing last row pairs with 0. dst rows at ldd words
// (a multiple of 16, >= cols: the last 16 words of a row are stored whole). With sums (ldd
// floats), each column's values are added to sums[c] in f32, row by row in order, from the
// words just paired (a bias gradient taken in the pass that reads dy anyway).
//
// The rows 24 pairs ahead are prefetched into L2 (prefetch_l2): a weight gradient's panel is
// 128 bytes of every row of a long operand, a stride the hardware's prefetchers follow
// poorly. ViT-Ti bf16 step (dW's phases timed inside the product, thread 0, 40 steps; 2 runs
// each, alternated): a panel's pairing at dW [192 x 768] 0.19-0.21 -> 0.07 ms a call, at
// [192 x 576] 0.11-0.14 -> 0.05-0.06, the whole products 1.29-1.39 -> 1.14-1.20 and 0.94-1.06
// -> 0.87-0.91 ms; 16 and 32 pairs ahead were alike, 48 worse; prefetching into L1
// (prefetcht0) gained little (8 pairs ahead: 0.16 ms a panel at [192 x 768]). Attention's
// pairings of one head's operands lost nothing (core_bench BM_Attention bf16, 3 runs each:
// forward 0.57-0.59 -> 0.59-0.61 of the ceiling, forward + backward 0.70-0.72 -> 0.70-0.72).
constexpr int64_t kPairPrefetch = 24;
BOOSTER_AVX512 inline void pack_pairs(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld, uint32_t* dst, int64_t ldd,
                                      float* sums = nullptr) {
  for (int64_t p = 0; p < (rows + 1) / 2; ++p) {
    const bf16_t* r0 = src + 2 * p * ld;
    const bf16_t* r1 = 2 * p + 1 < rows ? r0 + ld : nullptr;
    if (2 * (p + kPairPrefetch) + 1 < rows) {
      prefetch_l2(r0 + 2 * kPairPrefetch * ld, cols * 2);
      prefetch_l2(r0 + (2 * kPairPrefetch + 1) * ld, cols * 2);
    }
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
      const __mmask32 m = cols - c0 >= 32 ? ~__mmask32(0) : __mmask32((1u << (cols - c0)) - 1);
      const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + c0);
      const __m512i b = r1 ? _mm512_maskz_loadu_epi16(m, r1 + c0) : _mm512_setzero_si512();
      const __m512i lo = pair_words(a, b, false);
      _mm512_storeu_si512(dst + p * ldd + c0, lo);
      if (sums) add_pair_values(sums + c0, lo);
      if (c0 + 16 < cols) {
        const __m512i hi = pair_words(a, b, true);
        _mm512_storeu_si512(dst + p * ldd + c0 + 16, hi);
        if (sums) add_pair_values(sums + c0 + 16, hi);
      }
    }
  }
}
// 16 lanes stored as f32, or rounded to bf16 (narrow16); the masked forms store only m's lanes.
BOOSTER_AVX512 inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
BOOSTER_AVX512 inline void store16(bf16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16(v));
}
BOOSTER_AVX512 inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
BOOSTER_AVX512 inline void store16(bf16_t* p, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(p, m, narrow16(v)); }
// The same on AVX512-BF16 CPUs: bf16 rounded by vcvtneps2bf16 (nearest even, NaNs kept quiet,
// as narrow16), one instruction where narrow16 takes seven. The f32 forms are store16's, so
// that one kernel body serves both storage types.
BOOSTER_AVX512 inline void store16_native(float* p, __m512 v) { store16(p, v); }
BOOSTER_AVX512 inline void store16_native(float* p, __mmask16 m, __m512 v) { store16(p, m, v); }
BOOSTER_AVX512_BF16 inline void store16_native(bf16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}
BOOSTER_AVX512_BF16 inline void store16_native(bf16_t* p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
}

}  // namespace booster::kernels::avx512
