// Attention a head at a time on AVX-512 (attention_avx512.h).
//
// Every product of attention, forward and backward, is C = alpha A B with B's rows read as
// vectors and A's elements broadcast from anywhere (A(i, k) = a[i a_rs + k a_cs]), so a
// transposed A (P^T for dV, dS^T for dK) costs no copy. Only the two products against a
// transposed operand (q k^T and dO v^T) pack it: k or v of one head, transposed into a
// [d, Tk rounded up to 16] panel. Scores live in a per-thread scratch from their product
// through softmax (or its backward) to the products that read them: the forward's a block of
// rows at a time (kRowBlock), the backward's a whole head (197 x 208 floats at ViT shapes,
// 160 KB); threads take heads.
//
// bf16 (on AVX512-BF16 without AMX) runs the same products with vdpbf16ps, two k at a time: the scores and
// their gradients in f32, probabilities and dS rounded to bf16 for the products that read them.
//
// Measured at ViT-B shapes (batch 8, 12 heads of 64, 197 tokens), 2 threads, Zen-5 class,
// alternated with the batched oneDNN path (core_bench BM_Attention): f32 forward 4.0-4.2 ms
// against 5.9, forward+backward 11.0 against 15.0-15.7; bf16 forward 2.65-3.0 against 3.25,
// forward+backward 6.55-7.5 against 8.4. One thread, one head: f32 products 186-196 GFLOP/s,
// bf16 350-440; softmax 9.6 us of a head's forward (the exp bounds it). The probabilities
// (and the backward's dS) leave softmax's normalizing pass in their final form, rounded and
// stored where the products and the backward read them, instead of in three passes
// (normalize, round, copy out): share of the ceiling, 5 runs alternated with the three-pass
// build, bf16 forward 0.43-0.51 against 0.40-0.46, forward+backward 0.54-0.60 against
// 0.48-0.59; f32 forward 0.60-0.66 against 0.58-0.64.
#include "core/kernels/attention_avx512.h"

#include <dnnl.hpp>

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"

namespace booster::kernels {
namespace {

constexpr int kRows = 6;  // rows of C one tile holds
constexpr int kVecs = 4;  // 16-float vectors of C one tile holds: 24 accumulators

// The register tile both kernels run, C[r][16 v + j] = alpha sum_k A(r, k) B[k][16 v + j] for
// R rows and V vectors (with Masked, the last vector only under `tail`): R x V accumulators;
// per k, V vectors of B's row k and R broadcasts of A(r, k). VEC is the operands' vector type,
// LOAD(p) / LOAD_MASKED(p) read a B vector, BCAST(p) an A element, STEP(acc, a, b) adds one
// product; store16_native writes alpha times an accumulator (bf16 rounded in one instruction).
// A macro, not a template: each kernel's body needs its own target.
#define BOOSTER_ATTENTION_TILE(VEC, LOAD, LOAD_MASKED, BCAST, STEP)                   \
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
  BOOSTER_ATTENTION_TILE(__m512, LOAD, LOAD_MASKED, BCAST, STEP)
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
  BOOSTER_ATTENTION_TILE(__m512i, LOAD, LOAD_MASKED, BCAST, STEP)
#undef LOAD
#undef LOAD_MASKED
#undef BCAST
#undef STEP
}
#undef BOOSTER_ATTENTION_TILE

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

// C [M, N] (rows at ldc) = alpha A B, A(i, k) = a[i a_rs + k a_cs], B [K, N] (rows at ldb), on
// one kernel's tiles (for bf16, K counts pairs): column blocks of 64, each swept by tiles of
// 6 rows while it stays in cache.
template <typename A, typename Out>
void gemm(const TileTable<A, Out>& tiles, int64_t M, int64_t N, int64_t K, const A* a, int64_t a_rs, int64_t a_cs,
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

// dst[c][r] = src[r][c] for r < rows, c < cols (src rows at ld), and 0 for rows <= r < ldd
// (ldd: rows rounded up to 16, the panel's row length).
BOOSTER_AVX512 void pack_transposed(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst, int64_t ldd) {
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = avx512::lanes(nc);
    for (int64_t r0 = 0; r0 < ldd; r0 += 16) {
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * ld + c0) : _mm512_setzero_ps();
      avx512::transpose16(r);
      for (int64_t j = 0; j < nc; ++j) _mm512_storeu_ps(dst + (c0 + j) * ldd + r0, r[j]);
    }
  }
}

// dst[p][c] = the word (src[2 p][c], src[2 p + 1][c]) for p < ceil(rows / 2), c < cols: bf16
// rows [rows, cols] (rows at ld) paired down their columns as vdpbf16ps reads a B operand, or
// an A operand read down its columns; a missing last row pairs with 0. dst rows at ldd words
// (a multiple of 16, >= cols: the last 16 words of a row are stored whole).
BOOSTER_AVX512 void pack_pairs(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld, uint32_t* dst, int64_t ldd) {
  for (int64_t p = 0; p < (rows + 1) / 2; ++p) {
    const bf16_t* r0 = src + 2 * p * ld;
    const bf16_t* r1 = 2 * p + 1 < rows ? r0 + ld : nullptr;
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
      const __mmask32 m = cols - c0 >= 32 ? ~__mmask32(0) : __mmask32((1u << (cols - c0)) - 1);
      const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + c0);
      const __m512i b = r1 ? _mm512_maskz_loadu_epi16(m, r1 + c0) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + p * ldd + c0, avx512::pair_words(a, b, false));
      if (c0 + 16 < cols) _mm512_storeu_si512(dst + p * ldd + c0 + 16, avx512::pair_words(a, b, true));
    }
  }
}

// The row passes of softmax and its backward, stamped out once per instruction set (TARGET):
// the f32 kernels run on AVX-512 CPUs without AVX512-BF16 too.
//
// softmax_row: s (n scores in f32, in a row padded to 16 = np) gives the probabilities,
// written in one pass (the normalizing one) to `padded` (np values, zeros past n; may be s
// itself) and to `dst` (n values). With `spill`, dst's last vector is stored whole: its lanes
// past n land on the next row's first values, which the next row then overwrites (masked
// stores are slow on AMD's AVX-512). A NaN or +inf score, or a row of -inf, makes the row NaN,
// as exp(x - max) would. s is left holding the exponentials.
//
// softmax_grad_row: ds (dP, n values in f32, in a row padded to 16) gives alpha p (dP - <dP, p>)
// for the probabilities p (T), written to out (f32, in place or not, or bf16) with zeros past n
// up to the padding.
#define BOOSTER_SOFTMAX_ROWS(TARGET)                                                                                   \
  template <typename Out>                                                                                              \
  TARGET void softmax_row(float* s, int64_t n, Out* padded, Out* dst, bool spill) {                                    \
    const int64_t full = n / 16 * 16;                                                                                  \
    const __mmask16 tail = avx512::lanes(n - full);                                                                    \
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());                                                \
    for (int64_t j = 0; j < full; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));                               \
    if (tail) m = _mm512_mask_max_ps(m, tail, m, _mm512_loadu_ps(s + full));                                           \
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));                                                         \
    __m512 sum = _mm512_setzero_ps();                                                                                  \
    __mmask16 bad = 0;                                                                                                 \
    for (int64_t j = 0; j < full; j += 16) {                                                                           \
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + j), mx);                                                      \
      bad |= _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);                                                                   \
      const __m512 e = avx512::exp_nonpositive(d);                                                                     \
      _mm512_storeu_ps(s + j, e);                                                                                      \
      sum = _mm512_add_ps(sum, e);                                                                                     \
    }                                                                                                                  \
    if (tail) {                                                                                                        \
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + full), mx);                                                   \
      bad |= _mm512_mask_cmp_ps_mask(tail, d, d, _CMP_UNORD_Q);                                                        \
      const __m512 e = _mm512_maskz_mov_ps(tail, avx512::exp_nonpositive(d));                                          \
      _mm512_storeu_ps(s + full, e);                                                                                   \
      sum = _mm512_add_ps(sum, e);                                                                                     \
    }                                                                                                                  \
    const __m512 inv = bad ? _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())                                   \
                           : _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));                                         \
    for (int64_t j = 0; j < full; j += 16) {                                                                           \
      const __m512 pv = _mm512_mul_ps(_mm512_loadu_ps(s + j), inv);                                                    \
      avx512::store16_native(padded + j, pv);                                                                          \
      avx512::store16_native(dst + j, pv);                                                                             \
    }                                                                                                                  \
    if (tail) {                                                                                                        \
      const __m512 pv = _mm512_maskz_mul_ps(tail, _mm512_loadu_ps(s + full), inv);                                     \
      avx512::store16_native(padded + full, pv);                                                                       \
      if (spill) avx512::store16_native(dst + full, pv);                                                               \
      else avx512::store16_native(dst + full, tail, pv);                                                               \
    }                                                                                                                  \
  }                                                                                                                    \
  template <typename T, typename Out>                                                                                  \
  TARGET void softmax_grad_row(const float* ds, const T* p, int64_t n, float alpha, Out* out) {                        \
    const int64_t full = n / 16 * 16;                                                                                  \
    const __mmask16 tail = avx512::lanes(n - full);                                                                    \
    __m512 dot = _mm512_setzero_ps();                                                                                  \
    for (int64_t j = 0; j < full; j += 16)                                                                             \
      dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + j), avx512::load16(p + j), dot);                                      \
    if (tail) dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + full), avx512::load16(p + full, tail), dot);                  \
    const __m512 d = _mm512_set1_ps(_mm512_reduce_add_ps(dot)), a = _mm512_set1_ps(alpha);                             \
    for (int64_t j = 0; j < full; j += 16) {                                                                           \
      const __m512 ap = _mm512_mul_ps(a, avx512::load16(p + j));                                                       \
      avx512::store16_native(out + j, _mm512_mul_ps(ap, _mm512_sub_ps(_mm512_loadu_ps(ds + j), d)));                   \
    }                                                                                                                  \
    if (tail) {                                                                                                        \
      const __m512 ap = _mm512_mul_ps(a, avx512::load16(p + full, tail));                                              \
      avx512::store16_native(out + full, _mm512_maskz_mul_ps(tail, ap, _mm512_sub_ps(_mm512_loadu_ps(ds + full), d))); \
    }                                                                                                                  \
  }
namespace rows_f32 {
BOOSTER_SOFTMAX_ROWS(BOOSTER_AVX512)
}
namespace rows_bf16 {
BOOSTER_SOFTMAX_ROWS(BOOSTER_AVX512_BF16)
}
#undef BOOSTER_SOFTMAX_ROWS

// One operand's [B, h, T, d] view: head (b, h) starts at base + b sb + h sh, rows at st.
template <typename T>
struct Heads {
  T* base;
  int64_t sb, sh, st;
  explicit Heads(const Tensor& t)
      : base(t.defined() ? static_cast<T*>(t.raw_data()) : nullptr),
        sb(t.defined() ? t.strides()[0] : 0),
        sh(t.defined() ? t.strides()[1] : 0),
        st(t.defined() ? t.strides()[2] : 0) {}
  T* at(int64_t b, int64_t h) const { return base + b * sb + h * sh; }
  // bf16 rows as pairs (32-bit words)
  const uint32_t* words(int64_t b, int64_t h) const { return reinterpret_cast<const uint32_t*>(at(b, h)); }
};

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Rows of a head the forward takes at a time, from scores through softmax to the context:
// their scores (48 x 208 floats at ViT shapes, 40 KB) stay in L1/L2 instead of a whole head's
// (160 KB) going out to L2 and back. BM_Attention at ViT-B shapes, 2 threads, Zen-5 class, 6
// runs alternated with whole heads: bf16 forward 0.48-0.52 of the ceiling against 0.43-0.50
// (12, 24, 36, 66 and 96 rows were between); f32 forward 0.62-0.69 against 0.60-0.68. The
// backward's dP taken the same way gained nothing (0.52-0.54 against 0.53-0.54) and stays whole.
constexpr int64_t kRowBlock = 48;

// Whether row i of a head's [tq, tk] probabilities may be stored with its last vector whole
// (softmax_row's spill): the lanes past the row stay inside the head, where later rows
// overwrite them (another thread's head begins right after it).
bool spills(int64_t i, int64_t tq, int64_t tk) { return i * tk + round16(tk) <= tq * tk; }

// Runs f(b, h, scratch) for every head, threads taking contiguous runs of heads, each with
// its own scratch of `bytes` bytes (64-byte aligned).
template <typename F>
void for_each_head(int64_t B, int64_t H, int64_t bytes, F&& f) {
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    Tensor scratch = Tensor::empty({(bytes + 63) / 64 * 16});
    for (int64_t i = lo; i < hi; ++i) f(i / H, i % H, static_cast<char*>(scratch.raw_data()));
  });
}

// Carves a scratch into consecutive 64-byte aligned arrays.
struct Carver {
  char* p;
  template <typename T>
  T* take(int64_t n) {
    T* r = reinterpret_cast<T*>(p);
    p += (n * int64_t(sizeof(T)) + 63) / 64 * 64;
    return r;
  }
  static int64_t bytes(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t n : sizes) total += (n + 63) / 64 * 64;
    return total;
  }
};

// f32: the products on f32 tiles; k and v packed transposed.
void forward_f32(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& out, float alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t np = round16(tk);
  const Heads<float> Q(q), K(k), V(v), O(out);
  float* P = probs.data<float>();
  const int64_t rb = std::min(kRowBlock, tq);
  for_each_head(B, H, Carver::bytes({rb * np * 4, d * np * 4}), [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* s = c.take<float>(rb * np);  // a block of rows' scores, then probabilities
    float* kt = c.take<float>(d * np);  // k^T
    float* p = P + (b * H + h) * tq * tk;
    pack_transposed(K.at(b, h), tk, d, K.st, kt, np);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0);
      gemm(kF32, rows, np, d, Q.at(b, h) + r0 * Q.st, Q.st, 1, kt, np, s, np, alpha);
      for (int64_t i = 0; i < rows; ++i)
        rows_f32::softmax_row(s + i * np, tk, s + i * np, p + (r0 + i) * tk, spills(r0 + i, tq, tk));
      gemm(kF32, rows, dv, tk, s, np, 1, V.at(b, h), V.st, O.at(b, h) + r0 * O.st, O.st, 1.0f);
    }
  });
}

void backward_f32(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& dout,
                  const Tensor& dq, const Tensor& dk, const Tensor& dv, float alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dvs = v.size(3);
  const int64_t np = round16(tk);
  const Heads<float> Q(q), K(k), V(v), dO(dout), dQ(dq), dK(dk), dV(dv);
  const float* P = probs.data<float>();
  const bool scores = dq.defined() || dk.defined();
  for_each_head(B, H, Carver::bytes({tq * np * 4, dvs * np * 4}), [&](int64_t b, int64_t h, char* scratch) {
    const float* p = P + (b * H + h) * tq * tk;
    if (dv.defined())  // dV = P^T dO: P read down its columns
      gemm(kF32, tk, dvs, tq, p, 1, tk, dO.at(b, h), dO.st, dV.at(b, h), dV.st, 1.0f);
    if (!scores) return;
    Carver c{scratch};
    float* ds = c.take<float>(tq * np);  // dP, then alpha dS
    float* vt = c.take<float>(dvs * np);  // v^T
    pack_transposed(V.at(b, h), tk, dvs, V.st, vt, np);
    gemm(kF32, tq, np, dvs, dO.at(b, h), dO.st, 1, vt, np, ds, np, 1.0f);
    for (int64_t i = 0; i < tq; ++i) rows_f32::softmax_grad_row(ds + i * np, p + i * tk, tk, alpha, ds + i * np);
    if (dq.defined()) gemm(kF32, tq, d, tk, ds, np, 1, K.at(b, h), K.st, dQ.at(b, h), dQ.st, 1.0f);
    if (dk.defined()) gemm(kF32, tk, d, tq, ds, 1, np, Q.at(b, h), Q.st, dK.at(b, h), dK.st, 1.0f);
  });
}

// bf16: the products on vdpbf16ps tiles, f32 scores; k and v transposed as pairs of d
// (words), the other B operands and the column-read A operands (P, dS) paired down their rows.
void forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& out, float alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t np = round16(tk), kp = (tk + 1) / 2;
  const Heads<bf16_t> Q(q), K(k), V(v), O(out);
  bf16_t* P = static_cast<bf16_t*>(probs.raw_data());
  const int64_t ldv = round16(dv);
  const int64_t rb = std::min(kRowBlock, tq);
  const int64_t bytes = Carver::bytes({rb * np * 4, rb * np * 2, d / 2 * np * 4, kp * ldv * 4});
  for_each_head(B, H, bytes, [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* s = c.take<float>(rb * np);           // a block of rows' scores in f32
    bf16_t* pb = c.take<bf16_t>(rb * np);        // their probabilities, rows padded with zeros
    uint32_t* kt = c.take<uint32_t>(d / 2 * np);  // k^T in pairs of d
    uint32_t* vp = c.take<uint32_t>(kp * ldv);    // v in pairs of tokens
    bf16_t* p = P + (b * H + h) * tq * tk;
    pack_transposed(reinterpret_cast<const float*>(K.at(b, h)), tk, d / 2, K.st / 2, reinterpret_cast<float*>(kt), np);
    pack_pairs(V.at(b, h), tk, dv, V.st, vp, ldv);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0);
      gemm(kBf16ToF32, rows, np, d / 2, Q.words(b, h) + r0 * (Q.st / 2), Q.st / 2, 1, kt, np, s, np, alpha);
      for (int64_t i = 0; i < rows; ++i)
        rows_bf16::softmax_row(s + i * np, tk, pb + i * np, p + (r0 + i) * tk, spills(r0 + i, tq, tk));
      gemm(kBf16ToBf16, rows, dv, kp, reinterpret_cast<const uint32_t*>(pb), np / 2, 1, vp, ldv, O.at(b, h) + r0 * O.st,
           O.st, 1.0f);
    }
  });
}

void backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& dout,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv, float alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dvs = v.size(3);
  const int64_t np = round16(tk), qp = (tq + 1) / 2, kp = (tk + 1) / 2;
  const int64_t ld = round16(d), ldv = round16(dvs);
  const Heads<bf16_t> Q(q), K(k), V(v), dO(dout), dQ(dq), dK(dk), dV(dv);
  const bf16_t* P = static_cast<const bf16_t*>(probs.raw_data());
  const bool scores = dq.defined() || dk.defined();
  const int64_t bytes = Carver::bytes({tq * np * 4, tq * np * 2, qp * np * 4, dvs / 2 * np * 4, std::max(qp, kp) * std::max(ld, ldv) * 4});
  for_each_head(B, H, bytes, [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* ds = c.take<float>(tq * np);               // dP in f32
    bf16_t* dsb = c.take<bf16_t>(tq * np);            // alpha dS, rows padded with zeros
    uint32_t* apack = c.take<uint32_t>(qp * np);      // P or dS paired down their rows
    uint32_t* vt = c.take<uint32_t>(dvs / 2 * np);    // v^T in pairs of dv
    uint32_t* bpack = c.take<uint32_t>(std::max(qp, kp) * std::max(ld, ldv));  // dO, k or q in pairs of tokens
    const bf16_t* p = P + (b * H + h) * tq * tk;
    if (dv.defined()) {  // dV = P^T dO
      pack_pairs(p, tq, tk, tk, apack, np);
      pack_pairs(dO.at(b, h), tq, dvs, dO.st, bpack, ldv);
      gemm(kBf16ToBf16, tk, dvs, qp, apack, 1, np, bpack, ldv, dV.at(b, h), dV.st, 1.0f);
    }
    if (!scores) return;
    pack_transposed(reinterpret_cast<const float*>(V.at(b, h)), tk, dvs / 2, V.st / 2, reinterpret_cast<float*>(vt), np);
    gemm(kBf16ToF32, tq, np, dvs / 2, dO.words(b, h), dO.st / 2, 1, vt, np, ds, np, 1.0f);
    for (int64_t i = 0; i < tq; ++i)
      rows_bf16::softmax_grad_row(ds + i * np, p + i * tk, tk, alpha, dsb + i * np);
    const uint32_t* dsw = reinterpret_cast<const uint32_t*>(dsb);
    if (dq.defined()) {  // dQ = dS K
      pack_pairs(K.at(b, h), tk, d, K.st, bpack, ld);
      gemm(kBf16ToBf16, tq, d, kp, dsw, np / 2, 1, bpack, ld, dQ.at(b, h), dQ.st, 1.0f);
    }
    if (dk.defined()) {  // dK = dS^T Q
      pack_pairs(dsb, tq, tk, np, apack, np);
      pack_pairs(Q.at(b, h), tq, d, Q.st, bpack, ld);
      gemm(kBf16ToBf16, tk, d, qp, apack, 1, np, bpack, ld, dK.at(b, h), dK.st, 1.0f);
    }
  });
}

// bf16 pairs need even widths and strides (a pair never straddles rows) and 4-byte alignment.
bool pairs_fit(const Tensor& t) {
  const auto& st = t.strides();
  return t.size(3) % 2 == 0 && st[0] % 2 == 0 && st[1] % 2 == 0 && st[2] % 2 == 0 &&
         reinterpret_cast<uintptr_t>(t.raw_data()) % 4 == 0;
}

}  // namespace

bool attention_avx512_operand_fits(const Tensor& t, DType dt) {
  return t.dtype() == dt && t.dim() == 4 && t.strides()[3] == 1 && (dt == DType::f32 || pairs_fit(t));
}

bool attention_avx512_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  const DType dt = q.dtype();
  // bf16 only where measured: on AMX CPUs oneDNN's batched products run on AMX tiles, which
  // these kernels were never timed against.
  static const bool amx = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  if (dt == DType::f32 ? !avx512::cpu_ok() : dt != DType::bf16 || !avx512::cpu_bf16_ok() || amx) return false;
  return attention_avx512_operand_fits(q, dt) && attention_avx512_operand_fits(k, dt) &&
         attention_avx512_operand_fits(v, dt);
}

void attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& out, double alpha) {
  if (q.dtype() == DType::f32) forward_f32(q, k, v, probs, out, float(alpha));
  else forward_bf16(q, k, v, probs, out, float(alpha));
}

void attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                               const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, double alpha) {
  if (q.dtype() == DType::f32) backward_f32(q, k, v, probs, dout, dq, dk, dv, float(alpha));
  else backward_bf16(q, k, v, probs, dout, dq, dk, dv, float(alpha));
}

}  // namespace booster::kernels
