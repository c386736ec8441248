// Attention a head at a time on AVX-512 (attention_avx512.h).
//
// Every product of attention, forward and backward, is C = alpha A B with B's rows read as
// vectors and A's elements broadcast from anywhere (A(i, k) = a[i a_rs + k a_cs]), so a
// transposed A (P^T for dV, dS^T for dK) costs no copy. Only the two products against a
// transposed operand (q k^T and dO v^T) pack it: k or v of one head, transposed into a
// [d, Tk rounded up to 16] panel. One head's scores (197 x 208 floats at ViT shapes, 160 KB)
// live in a per-thread scratch from their product through softmax (or its backward) to the
// products that read them; threads take heads.
//
// Measured at ViT-B shapes (batch 8, 12 heads of 64, 197 tokens), 2 threads, Zen-5 class,
// alternated with the batched oneDNN path: forward 4.55 ms against 5.9, forward+backward
// 12.1-12.5 against 15.0-15.7 (core_bench BM_Attention); one thread, one head: 186-196
// GFLOP/s in each product, softmax 11.5 us of a head's 65. ViT-Ti's step: attention 46 ->
// 36 ms, the step 3-4 % faster.
#include "core/kernels/attention_avx512.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <limits>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"

namespace booster::kernels {
namespace {

constexpr int kRows = 6;  // rows of C one tile holds
constexpr int kVecs = 4;  // 16-float vectors of C one tile holds: 24 accumulators

// C[r][16 v + j] = alpha sum_k A(r, k) B[k][16 v + j] for R rows and V vectors; with Masked,
// the last vector only under `tail`.
template <int R, int V, bool Masked>
BOOSTER_AVX512 void tile(int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
                         int64_t ldc, float alpha, __mmask16 tail) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* bk = b + k * ldb;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      bv[v] = Masked && v == V - 1 ? _mm512_maskz_loadu_ps(tail, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
    const float* ak = a + k * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* cp = c + r * ldc + 16 * v;
      const __m512 x = _mm512_mul_ps(acc[r][v], s);
      if (Masked && v == V - 1) _mm512_mask_storeu_ps(cp, tail, x);
      else _mm512_storeu_ps(cp, x);
    }
}

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, float, __mmask16);
#define BOOSTER_TILE_ROW(R)                                                                                    \
  {                                                                                                            \
    {&tile<R, 1, false>, &tile<R, 1, true>}, {&tile<R, 2, false>, &tile<R, 2, true>},                          \
        {&tile<R, 3, false>, &tile<R, 3, true>}, { &tile<R, 4, false>, &tile<R, 4, true> }                     \
  }
const TileFn kTiles[kRows][kVecs][2] = {BOOSTER_TILE_ROW(1), BOOSTER_TILE_ROW(2), BOOSTER_TILE_ROW(3),
                                        BOOSTER_TILE_ROW(4), BOOSTER_TILE_ROW(5), BOOSTER_TILE_ROW(6)};
#undef BOOSTER_TILE_ROW

// C [M, N] (rows at ldc) = alpha A B, A(i, k) = a[i a_rs + k a_cs], B [K, N] (rows at ldb):
// column blocks of 64, each swept by tiles of 6 rows while it stays in cache.
void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
          float* c, int64_t ldc, float alpha) {
  for (int64_t n0 = 0; n0 < N; n0 += 16 * kVecs) {
    const int64_t nn = std::min<int64_t>(16 * kVecs, N - n0);
    const int v = int((nn + 15) / 16);
    const bool masked = nn % 16 != 0;
    const __mmask16 tail = masked ? __mmask16((1u << (nn % 16)) - 1) : __mmask16(0xffff);
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      const int r = int(std::min<int64_t>(kRows, M - m0));
      kTiles[r - 1][v - 1][masked](K, a + m0 * a_rs, a_rs, a_cs, b + n0, ldb, c + m0 * ldc + n0, ldc, alpha, tail);
    }
  }
}

// 16 x 16 transpose in registers: r[i] holds row i on entry and column i on return.
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

// dst[c][r] = src[r][c] for r < rows, c < cols (src rows at ld), and 0 for rows <= r < ldd
// (ldd: rows rounded up to 16, the panel's row length).
BOOSTER_AVX512 void pack_transposed(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst, int64_t ldd) {
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = __mmask16((1u << nc) - 1);
    for (int64_t r0 = 0; r0 < ldd; r0 += 16) {
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * ld + c0) : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t j = 0; j < nc; ++j) _mm512_storeu_ps(dst + (c0 + j) * ldd + r0, r[j]);
    }
  }
}

BOOSTER_AVX512 inline __mmask16 lanes(int64_t n) { return __mmask16((1u << n) - 1); }

// One row of softmax: s (n scores in a row padded to 16) becomes the probabilities, also
// written to p (n floats). A NaN or +inf score, or a row of -inf, makes the row NaN, as
// exp(x - max) would.
BOOSTER_AVX512 void softmax_row(float* s, int64_t n, float* p) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = lanes(n - full);
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
  if (tail) m = _mm512_mask_max_ps(m, tail, m, _mm512_loadu_ps(s + full));
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
  __m512 sum = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + j), mx);
    bad |= _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    const __m512 e = avx512::exp_nonpositive(d);
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + full), mx);
    bad |= _mm512_mask_cmp_ps_mask(tail, d, d, _CMP_UNORD_Q);
    const __m512 e = _mm512_maskz_mov_ps(tail, avx512::exp_nonpositive(d));
    _mm512_storeu_ps(s + full, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 inv = bad ? _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())
                         : _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(s + j), inv);
    _mm512_storeu_ps(s + j, y);
    _mm512_storeu_ps(p + j, y);
  }
  if (tail) {
    const __m512 y = _mm512_maskz_mul_ps(tail, _mm512_loadu_ps(s + full), inv);
    _mm512_storeu_ps(s + full, y);
    _mm512_mask_storeu_ps(p + full, tail, y);
  }
}

// One row of softmax's backward, scaled: ds (dP, n values in a row padded to 16) becomes
// alpha p (dP - <dP, p>), 0 past n.
BOOSTER_AVX512 void softmax_grad_row(float* ds, const float* p, int64_t n, float alpha) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = lanes(n - full);
  __m512 dot = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + j), _mm512_loadu_ps(p + j), dot);
  if (tail) dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + full), _mm512_maskz_loadu_ps(tail, p + full), dot);
  const __m512 d = _mm512_set1_ps(_mm512_reduce_add_ps(dot)), a = _mm512_set1_ps(alpha);
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 ap = _mm512_mul_ps(a, _mm512_loadu_ps(p + j));
    _mm512_storeu_ps(ds + j, _mm512_mul_ps(ap, _mm512_sub_ps(_mm512_loadu_ps(ds + j), d)));
  }
  if (tail) {
    const __m512 ap = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(tail, p + full));
    _mm512_storeu_ps(ds + full, _mm512_maskz_mul_ps(tail, ap, _mm512_sub_ps(_mm512_loadu_ps(ds + full), d)));
  }
}

// One operand's [B, h, T, d] view: head (b, h) starts at base + b sb + h sh, rows at st.
struct Heads {
  float* base;
  int64_t sb, sh, st;
  explicit Heads(const Tensor& t)
      : base(t.defined() ? const_cast<float*>(t.data<float>()) : nullptr),
        sb(t.defined() ? t.strides()[0] : 0),
        sh(t.defined() ? t.strides()[1] : 0),
        st(t.defined() ? t.strides()[2] : 0) {}
  float* at(int64_t b, int64_t h) const { return base + b * sb + h * sh; }
};

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Runs f(b, h, scratch) for every head, threads taking contiguous runs of heads, each with
// its own scratch of `floats` floats.
template <typename F>
void for_each_head(int64_t B, int64_t H, int64_t floats, F&& f) {
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    Tensor scratch = Tensor::empty({floats});
    for (int64_t i = lo; i < hi; ++i) f(i / H, i % H, scratch.data<float>());
  });
}

}  // namespace

bool attention_avx512_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!avx512::cpu_ok() || q.dtype() != DType::f32) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (t->dtype() != DType::f32 || t->dim() != 4 || t->strides()[3] != 1) return false;
  return true;
}

void attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& out, double alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t np = round16(tk);
  const Heads Q(q), K(k), V(v), O(out);
  float* P = probs.data<float>();
  for_each_head(B, H, tq * np + d * np, [&](int64_t b, int64_t h, float* scratch) {
    float* s = scratch;            // [tq, np] scores, then probabilities
    float* kt = s + tq * np;       // [d, np] k^T
    float* p = P + (b * H + h) * tq * tk;
    pack_transposed(K.at(b, h), tk, d, K.st, kt, np);
    gemm(tq, np, d, Q.at(b, h), Q.st, 1, kt, np, s, np, float(alpha));
    for (int64_t i = 0; i < tq; ++i) softmax_row(s + i * np, tk, p + i * tk);
    gemm(tq, dv, tk, s, np, 1, V.at(b, h), V.st, O.at(b, h), O.st, 1.0f);
  });
}

void attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                               const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, double alpha) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dvs = v.size(3);
  const int64_t np = round16(tk);
  const Heads Q(q), K(k), V(v), dO(dout), dQ(dq), dK(dk), dV(dv);
  const float* P = probs.data<float>();
  const bool scores = dq.defined() || dk.defined();
  for_each_head(B, H, scores ? tq * np + dvs * np : 1, [&](int64_t b, int64_t h, float* scratch) {
    const float* p = P + (b * H + h) * tq * tk;
    if (dv.defined())  // dV = P^T dO: P read down its columns
      gemm(tk, dvs, tq, p, 1, tk, dO.at(b, h), dO.st, dV.at(b, h), dV.st, 1.0f);
    if (!scores) return;
    float* ds = scratch;        // [tq, np] dP, then alpha dS
    float* vt = ds + tq * np;   // [dv, np] v^T
    pack_transposed(V.at(b, h), tk, dvs, V.st, vt, np);
    gemm(tq, np, dvs, dO.at(b, h), dO.st, 1, vt, np, ds, np, 1.0f);
    for (int64_t i = 0; i < tq; ++i) softmax_grad_row(ds + i * np, p + i * tk, tk, float(alpha));
    if (dq.defined()) gemm(tq, d, tk, ds, np, 1, K.at(b, h), K.st, dQ.at(b, h), dQ.st, 1.0f);
    if (dk.defined()) gemm(tk, d, tq, ds, 1, np, Q.at(b, h), Q.st, dK.at(b, h), dK.st, 1.0f);
  });
}

}  // namespace booster::kernels
