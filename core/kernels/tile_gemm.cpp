// Register-tiled products on AVX-512 (tile_gemm.h).
//
// One thread, one product: C = alpha A B with B's rows read as vectors and A's
// elements broadcast from anywhere (A(i, k) = a[i a_rs + k a_cs]). A tile holds 6 rows x 4
// vectors of C (24 accumulators); per k it loads 4 vectors of B's row k and broadcasts 6
// elements of A. bf16 runs the same tile on vdpbf16ps, two k at a time. One thread, one
// attention head of ViT-B (attention_avx512.cpp): f32 products 186-196 GFLOP/s, bf16 350-440.
#include "core/kernels/tile_gemm.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>

#include "core/kernels/avx512_math.h"

namespace booster::kernels::tiles {
namespace {

constexpr int kRows = 6;  // rows of C one tile holds
constexpr int kVecs = 4;  // 16-float vectors of C one tile holds: 24 accumulators

// The register tile every kernel runs, C[r][16 v + j] = alpha sum_k A(r, k) B[k][16 v + j] for
// R rows and V vectors (with Masked, the last vector only under `tail`): R x V accumulators;
// per k, V vectors of B's row k and R broadcasts of A(r, k). VEC is the operands' vector type,
// LOAD(p) / LOAD_MASKED(p) read a B vector, BCAST(p) an A element, STEP(acc, a, b) adds one
// product; store16_native writes alpha times an accumulator (bf16 rounded in one instruction).
// A macro, not a template: each kernel's body needs its own target.
#define BOOSTER_TILE(VEC, LOAD, LOAD_MASKED, BCAST, STEP)                   \
  __m512 acc[R][V];                                                                          \
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                        \
      _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();  \
  for (int64_t k = 0; k < K; ++k) {                                                          \
    const auto* bk = b + k * ldb;                                                            \
    VEC bv[V];                                                                               \
    _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) bv[v] =                              \
        Masked && v == V - 1 ? LOAD_MASKED(bk + 16 * v) : LOAD(bk + 16 * v);                 \
    const auto* ak = a + k * a_cs;                                                           \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                                    \
      const VEC av = BCAST(ak + r * a_rs);                                                   \
      _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) acc[r][v] = STEP(acc[r][v], av, bv[v]); \
    }                                                                                        \
  }                                                                                          \
  const __m512 s = _mm512_set1_ps(alpha);                                                    \
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)                                        \
      _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v)                                    \
          if (Masked && v == V - 1) avx512::store16_native(c + r * ldc + 16 * v, tail, _mm512_mul_ps(acc[r][v], s)); \
          else avx512::store16_native(c + r * ldc + 16 * v, _mm512_mul_ps(acc[r][v], s));

// f32: one FMA per product.
template <int R, int V, bool Masked>
BOOSTER_AVX512 void tile(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                         int64_t ldc, float alpha, __mmask16 tail) {
#define LOAD(p) _mm512_loadu_ps(p)
#define LOAD_MASKED(p) _mm512_maskz_loadu_ps(tail, p)
#define BCAST(p) _mm512_set1_ps(*(p))
#define STEP(acc, x, y) _mm512_fmadd_ps(x, y, acc)
  BOOSTER_TILE(__m512, LOAD, LOAD_MASKED, BCAST, STEP)
#undef LOAD
#undef LOAD_MASKED
#undef BCAST
#undef STEP
}

// bf16: A(r, k) and B's elements are 32-bit words holding two bf16 of consecutive k (the lower
// one first; K counts pairs), and AVX512-BF16's vdpbf16ps adds both products to the f32
// accumulator at once. Out is float or bf16_t (rounded to nearest even).
template <int R, int V, bool Masked, typename Out>
BOOSTER_AVX512_BF16 void tile_bf16(int64_t K, const uint32_t* a, int64_t a_rs, int64_t a_cs, const uint32_t* b,
                                   int64_t ldb, Out* c, int64_t ldc, float alpha, __mmask16 tail) {
#define LOAD(p) _mm512_loadu_si512(p)
#define LOAD_MASKED(p) _mm512_maskz_loadu_epi32(tail, p)
#define BCAST(p) _mm512_set1_epi32(int(*(p)))
#define STEP(acc, x, y) _mm512_dpbf16_ps(acc, (__m512bh)(x), (__m512bh)(y))
  BOOSTER_TILE(__m512i, LOAD, LOAD_MASKED, BCAST, STEP)
#undef LOAD
#undef LOAD_MASKED
#undef BCAST
#undef STEP
}
#undef BOOSTER_TILE

// Every tile shape of one kernel: [rows - 1][vectors - 1][masked].
template <typename A, typename Out>
using TileFn = void (*)(int64_t, const A*, int64_t, int64_t, const A*, int64_t, Out*, int64_t, float, __mmask16);
template <typename A, typename Out>
using TileTable = TileFn<A, Out>[kRows][kVecs][2];

#define BOOSTER_TILE_ROW(T, R, ...)                                                                 \
  {                                                                                                 \
    {&T<R, 1, false, ##__VA_ARGS__>, &T<R, 1, true, ##__VA_ARGS__>},                                \
        {&T<R, 2, false, ##__VA_ARGS__>, &T<R, 2, true, ##__VA_ARGS__>},                            \
        {&T<R, 3, false, ##__VA_ARGS__>, &T<R, 3, true, ##__VA_ARGS__>}, {                          \
      &T<R, 4, false, ##__VA_ARGS__>, &T<R, 4, true, ##__VA_ARGS__>                                 \
    }                                                                                               \
  }
#define BOOSTER_TILE_TABLE(T, ...)                                                                  \
  {BOOSTER_TILE_ROW(T, 1, ##__VA_ARGS__), BOOSTER_TILE_ROW(T, 2, ##__VA_ARGS__),                    \
   BOOSTER_TILE_ROW(T, 3, ##__VA_ARGS__), BOOSTER_TILE_ROW(T, 4, ##__VA_ARGS__),                    \
   BOOSTER_TILE_ROW(T, 5, ##__VA_ARGS__), BOOSTER_TILE_ROW(T, 6, ##__VA_ARGS__)}
const TileTable<float, float> kF32 = BOOSTER_TILE_TABLE(tile);
const TileTable<uint32_t, float> kBf16ToF32 = BOOSTER_TILE_TABLE(tile_bf16, float);
const TileTable<uint32_t, bf16_t> kBf16ToBf16 = BOOSTER_TILE_TABLE(tile_bf16, bf16_t);
#undef BOOSTER_TILE_TABLE
#undef BOOSTER_TILE_ROW

// gemm (tile_gemm.h) on one kernel's tiles.
template <typename A, typename Out>
void sweep(const TileTable<A, Out>& tiles, int64_t M, int64_t N, int64_t K, const A* a, int64_t a_rs, int64_t a_cs,
           const A* b, int64_t ldb, Out* c, int64_t ldc, float alpha) {
  for (int64_t n0 = 0; n0 < N; n0 += 16 * kVecs) {
    const int64_t nn = std::min<int64_t>(16 * kVecs, N - n0);
    const int v = int((nn + 15) / 16);
    const bool masked = nn % 16 != 0;
    const __mmask16 tail = masked ? avx512::lanes(nn % 16) : __mmask16(0xffff);
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      const int r = int(std::min<int64_t>(kRows, M - m0));
      tiles[r - 1][v - 1][masked](K, a + m0 * a_rs, a_rs, a_cs, b + n0, ldb, c + m0 * ldc + n0, ldc, alpha, tail);
    }
  }
}

}  // namespace

BOOSTER_AVX512 void pack_transposed(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst, int64_t ldd) {
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = avx512::lanes(nc);
    for (int64_t r0 = 0; r0 < ldd; r0 += 16) {
      for (int64_t i = r0 + 16; i < std::min(rows, r0 + 32); ++i)  // the next block's pieces
        avx512::prefetch_l2(src + i * ld + c0, nc * 4);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * ld + c0) : _mm512_setzero_ps();
      avx512::transpose16(r);
      for (int64_t j = 0; j < nc; ++j) _mm512_storeu_ps(dst + (c0 + j) * ldd + r0, r[j]);
    }
  }
}

void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
          float* c, int64_t ldc, float alpha) {
  sweep(kF32, M, N, K, a, a_rs, a_cs, b, ldb, c, ldc, alpha);
}
void gemm(int64_t M, int64_t N, int64_t K, const uint32_t* a, int64_t a_rs, int64_t a_cs, const uint32_t* b,
          int64_t ldb, float* c, int64_t ldc, float alpha) {
  sweep(kBf16ToF32, M, N, K, a, a_rs, a_cs, b, ldb, c, ldc, alpha);
}
void gemm(int64_t M, int64_t N, int64_t K, const uint32_t* a, int64_t a_rs, int64_t a_cs, const uint32_t* b,
          int64_t ldb, bf16_t* c, int64_t ldc, float alpha) {
  sweep(kBf16ToBf16, M, N, K, a, a_rs, a_cs, b, ldb, c, ldc, alpha);
}

bool bf16_ok() {
  static const bool ok =
      avx512::cpu_bf16_ok() && !avx512::cpu_amx_ok();
  return ok;
}

}  // namespace booster::kernels::tiles
