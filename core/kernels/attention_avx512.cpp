// Attention a head at a time on AVX-512 (attention_avx512.h).
//
// Every product of attention, forward and backward, is C = alpha A B on the register tiles of
// tile_gemm.h, whose A is read with any strides, so a transposed A (dS^T for dK) costs no
// copy. The two products against a transposed operand (q k^T and dO v^T) pack it: k or v of
// one head, transposed into a [d, Tk rounded up to 16] panel. f32's dV = P^T dO turns P around
// too: read down its columns from memory (rows of 197 floats, out of line with the cache
// lines, not touched since the forward) it took 2.2x the time of the other products; ViT-Ti
// f32 step, a layer's dV per thread (thread 0 of 2, 20 steps, 2 runs each alternated)
// 1.30 / 1.32 -> 0.88 / 0.85 ms with the transposing copy (bf16 pairs P anyway).
//
// Scores live in a per-thread scratch from their product through softmax (or its backward) to
// the products that read them: the forward's a block of rows at a time (kRowBlock), the
// backward's a whole head (197 x 208 floats at ViT shapes, 160 KB); threads take heads.
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

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"
#include "core/kernels/tile_gemm.h"

namespace booster::kernels {
namespace {

// The row passes of softmax and its backward, stamped out once per instruction set (TARGET):
// the f32 kernels run on AVX-512 CPUs without AVX512-BF16 too.
//
// softmax_row: s (n scores in f32 and in log2 units, times log2(e): the product's alpha
// carries it, in a row padded to 16 = np) gives the probabilities, written in one pass (the
// normalizing one) to `padded` (np values, zeros past n; may be s itself) and to `dst` (n
// values). With `spill`, dst's last vector is stored whole: its lanes past n land on the next
// row's first values, which the next row then overwrites (masked stores are slow on AMD's
// AVX-512). A NaN or +inf score, or a row of -inf, makes the row NaN, as exp(x - max) would:
// x - max is NaN there, exp2_nonpositive keeps it, and the row's sum and every probability
// become NaN. s is left holding the exponentials.
//
// The exponentials are 2^(s - max) (exp2_nonpositive, avx512_math.h; degree 4 for bf16
// probabilities): the rows are bound by the FP pipes, and with the scores already in log2
// units the multiply by log2(e) rides on the product's alpha, while vreduceps and vscalefps
// take the rounding, the polynomial's argument and the scaling. A layer's softmax rows in the
// ViT-Ti bf16 forward (thread 0 of 2, 3 runs each alternated): Cephes' exp 0.235-0.241 ms,
// 2^(a log2 e) with a rounded 2^n 0.194-0.201 ms; this form: core_bench BM_Attention bf16
// forward 3.35-3.40 -> 3.29-3.34 ms against that one (3 runs alternated).
//
// softmax_row returns the row's log2-sum-exp, max + log2(sum) (in the scores' log2 units),
// which the causal attention keeps for its backward.
//
// softmax_grad_row: ds (dP, n values in f32, in a row padded to 16) gives alpha p (dP - <dP, p>)
// for the probabilities p (T), written to out (f32, in place or not, or bf16) with zeros past n
// up to the padding. `given` replaces <dP, p> by a value from elsewhere (a row whose keys are
// split into blocks: <dO, O> of the whole row, FlashAttention's D).
#define BOOSTER_SOFTMAX_ROWS(TARGET)                                                                                   \
  template <typename Out>                                                                                              \
  TARGET float softmax_row(float* s, int64_t n, Out* padded, Out* dst, bool spill) {                                   \
    constexpr int kDeg = std::is_same_v<Out, bf16_t> ? 4 : 5;                                                          \
    const int64_t full = n / 16 * 16;                                                                                  \
    const __mmask16 tail = avx512::lanes(n - full);                                                                    \
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());                                                \
    for (int64_t j = 0; j < full; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));                               \
    if (tail) m = _mm512_mask_max_ps(m, tail, m, _mm512_loadu_ps(s + full));                                           \
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));                                                         \
    __m512 sum = _mm512_setzero_ps();                                                                                  \
    for (int64_t j = 0; j < full; j += 16) {                                                                           \
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + j), mx);                                                      \
      const __m512 e = avx512::exp2_nonpositive<kDeg>(d);                                                              \
      _mm512_storeu_ps(s + j, e);                                                                                      \
      sum = _mm512_add_ps(sum, e);                                                                                     \
    }                                                                                                                  \
    if (tail) {                                                                                                        \
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + full), mx);                                                   \
      const __m512 e = _mm512_maskz_mov_ps(tail, avx512::exp2_nonpositive<kDeg>(d));                                   \
      _mm512_storeu_ps(s + full, e);                                                                                   \
      sum = _mm512_add_ps(sum, e);                                                                                     \
    }                                                                                                                  \
    const float total = _mm512_reduce_add_ps(sum);                                                                     \
    const __m512 inv = _mm512_set1_ps(1.0f / total);                                                                   \
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
    return _mm512_cvtss_f32(mx) + std::log2(total);                                                                                 \
  }                                                                                                                    \
  template <typename T, typename Out>                                                                                  \
  TARGET void softmax_grad_row(const float* ds, const T* p, int64_t n, float alpha, Out* out,                         \
                                const float* given = nullptr) {                                                        \
    const int64_t full = n / 16 * 16;                                                                                  \
    const __mmask16 tail = avx512::lanes(n - full);                                                                    \
    __m512 dot = _mm512_setzero_ps();                                                                                  \
    if (!given) {                                                                                                      \
      for (int64_t j = 0; j < full; j += 16)                                                                           \
        dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + j), avx512::load16(p + j), dot);                                    \
      if (tail) dot = _mm512_fmadd_ps(_mm512_loadu_ps(ds + full), avx512::load16(p + full, tail), dot);                \
    }                                                                                                                  \
    const __m512 d = _mm512_set1_ps(given ? *given : _mm512_reduce_add_ps(dot)), a = _mm512_set1_ps(alpha);            \
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
    tiles::pack_transposed(K.at(b, h), tk, d, K.st, kt, np);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0);
      tiles::gemm(rows, np, d, Q.at(b, h) + r0 * Q.st, Q.st, 1, kt, np, s, np, alpha * avx512::kLog2e);
      for (int64_t i = 0; i < rows; ++i)
        rows_f32::softmax_row(s + i * np, tk, s + i * np, p + (r0 + i) * tk, spills(r0 + i, tq, tk));
      tiles::gemm(rows, dv, tk, s, np, 1, V.at(b, h), V.st, O.at(b, h) + r0 * O.st, O.st, 1.0f);
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
  const int64_t nq = round16(tq);
  for_each_head(B, H, Carver::bytes({tq * np * 4, dvs * np * 4, tk * nq * 4}), [&](int64_t b, int64_t h, char* scratch) {
    const float* p = P + (b * H + h) * tq * tk;
    Carver c{scratch};
    float* ds = c.take<float>(tq * np);  // dP, then alpha dS
    float* vt = c.take<float>(dvs * np);  // v^T
    float* pt = c.take<float>(tk * nq);  // P^T
    if (dv.defined()) {  // dV = P^T dO, P turned around first (see the top of the file)
      tiles::pack_transposed(p, tq, tk, tk, pt, nq);
      tiles::gemm(tk, dvs, tq, pt, nq, 1, dO.at(b, h), dO.st, dV.at(b, h), dV.st, 1.0f);
    }
    if (!scores) return;
    tiles::pack_transposed(V.at(b, h), tk, dvs, V.st, vt, np);
    tiles::gemm(tq, np, dvs, dO.at(b, h), dO.st, 1, vt, np, ds, np, 1.0f);
    for (int64_t i = 0; i < tq; ++i) rows_f32::softmax_grad_row(ds + i * np, p + i * tk, tk, alpha, ds + i * np);
    if (dq.defined()) tiles::gemm(tq, d, tk, ds, np, 1, K.at(b, h), K.st, dQ.at(b, h), dQ.st, 1.0f);
    if (dk.defined()) tiles::gemm(tk, d, tq, ds, 1, np, Q.at(b, h), Q.st, dK.at(b, h), dK.st, 1.0f);
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
    tiles::pack_transposed(reinterpret_cast<const float*>(K.at(b, h)), tk, d / 2, K.st / 2, reinterpret_cast<float*>(kt), np);
    avx512::pack_pairs(V.at(b, h), tk, dv, V.st, vp, ldv);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0);
      tiles::gemm(rows, np, d / 2, Q.words(b, h) + r0 * (Q.st / 2), Q.st / 2, 1, kt, np, s, np, alpha * avx512::kLog2e);
      for (int64_t i = 0; i < rows; ++i)
        rows_bf16::softmax_row(s + i * np, tk, pb + i * np, p + (r0 + i) * tk, spills(r0 + i, tq, tk));
      tiles::gemm(rows, dv, kp, reinterpret_cast<const uint32_t*>(pb), np / 2, 1, vp, ldv, O.at(b, h) + r0 * O.st,
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
      avx512::pack_pairs(p, tq, tk, tk, apack, np);
      avx512::pack_pairs(dO.at(b, h), tq, dvs, dO.st, bpack, ldv);
      tiles::gemm(tk, dvs, qp, apack, 1, np, bpack, ldv, dV.at(b, h), dV.st, 1.0f);
    }
    if (!scores) return;
    tiles::pack_transposed(reinterpret_cast<const float*>(V.at(b, h)), tk, dvs / 2, V.st / 2, reinterpret_cast<float*>(vt), np);
    tiles::gemm(tq, np, dvs / 2, dO.words(b, h), dO.st / 2, 1, vt, np, ds, np, 1.0f);
    for (int64_t i = 0; i < tq; ++i)
      rows_bf16::softmax_grad_row(ds + i * np, p + i * tk, tk, alpha, dsb + i * np);
    const uint32_t* dsw = reinterpret_cast<const uint32_t*>(dsb);
    if (dq.defined()) {  // dQ = dS K
      avx512::pack_pairs(K.at(b, h), tk, d, K.st, bpack, ld);
      tiles::gemm(tq, d, kp, dsw, np / 2, 1, bpack, ld, dQ.at(b, h), dQ.st, 1.0f);
    }
    if (dk.defined()) {  // dK = dS^T Q
      avx512::pack_pairs(dsb, tq, tk, np, apack, np);
      avx512::pack_pairs(Q.at(b, h), tq, d, Q.st, bpack, ld);
      tiles::gemm(tk, d, qp, apack, 1, np, bpack, ld, dK.at(b, h), dK.st, 1.0f);
    }
  });
}

// Attention with each query's log-sum-exp (FlashAttention's block), f32, causal or not. The
// forward takes a block of rows' scores against only the keys the block's last row sees (all
// of them when not causal), softmaxes each row over its own keys and keeps the row's
// log2-sum-exp; the backward recomputes a head's probabilities from those (p = 2^(s - lse): no
// [T, T] matrix outlives the op) and runs backward_f32's products on them, the masked part
// zero. Ring attention runs it on blocks of a row's keys: then the backward's <dP, p> is the
// whole row's D, given.

// p[j] = 2^(s[j] - lse) for j < n, 0 for n <= j < np (np a multiple of 16).
BOOSTER_AVX512 void exp2_shifted_row(float* s, int64_t n, int64_t np, float lse) {
  const __m512 l = _mm512_set1_ps(lse), zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < np; j += 16) {
    const __mmask16 live = j + 16 <= n ? __mmask16(0xFFFF) : j < n ? avx512::lanes(n - j) : __mmask16(0);
    const __m512 t = _mm512_min_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), l), zero);
    _mm512_storeu_ps(s + j, _mm512_maskz_mov_ps(live, avx512::exp2_nonpositive<5>(t)));
  }
}

void flash_forward_f32(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, float* lse, float alpha,
                       bool causal) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t np = round16(tk), rb = std::min(kRowBlock, tq);
  const Heads<float> Q(q), K(k), V(v), O(out);
  for_each_head(B, H, Carver::bytes({rb * np * 4, d * np * 4}), [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* s = c.take<float>(rb * np);  // a block of rows' scores, then probabilities
    float* kt = c.take<float>(d * np);  // k^T
    float* l = lse + (b * H + h) * tq;
    tiles::pack_transposed(K.at(b, h), tk, d, K.st, kt, np);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0), keys = causal ? r0 + rows : tk, kn = round16(keys);
      tiles::gemm(rows, kn, d, Q.at(b, h) + r0 * Q.st, Q.st, 1, kt, np, s, np, alpha * avx512::kLog2e);
      for (int64_t i = 0; i < rows; ++i) {
        float* si = s + i * np;
        const int64_t n = causal ? r0 + i + 1 : tk;
        l[r0 + i] = rows_f32::softmax_row(si, n, si, si, false);
        std::fill(si + round16(n), si + kn, 0.0f);  // the keys after row i, up to the block's
      }
      tiles::gemm(rows, dv, keys, s, np, 1, V.at(b, h), V.st, O.at(b, h) + r0 * O.st, O.st, 1.0f);
    }
  });
}

// Causal: only the causal half. A block of query rows computes its probabilities, dP and dS
// against the keys it sees (zeros written up to the next multiple of kKeyBlock past them), dQ
// over those keys; then each block of kKeyBlock keys takes dK and dV from the query rows at or
// after it (dS^T and P^T read through strides). Half the products of the square.
constexpr int64_t kKeyBlock = 64;

void flash_backward_f32(const Tensor& q, const Tensor& k, const Tensor& v, const float* lse, const float* delta,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, float alpha, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dvs = v.size(3);
  const int64_t np = round16(tk), rb = std::min(kRowBlock, tq);
  const Heads<float> Q(q), K(k), V(v), dO(dout), dQ(dq), dK(dk), dV(dv);
  const int64_t bytes = Carver::bytes({tq * np * 4, tq * np * 4, dvs * np * 4, d * np * 4});
  for_each_head(B, H, bytes, [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* p = c.take<float>(tq * np);    // the probabilities, recomputed
    float* ds = c.take<float>(tq * np);   // dP, then alpha dS
    float* vt = c.take<float>(dvs * np);  // v^T
    float* kt = c.take<float>(d * np);    // k^T
    const float* l = lse + (b * H + h) * tq;
    const float* dd = delta ? delta + (b * H + h) * tq : nullptr;
    const bool grads_qk = dq.defined() || dk.defined();
    tiles::pack_transposed(K.at(b, h), tk, d, K.st, kt, np);
    if (grads_qk) tiles::pack_transposed(V.at(b, h), tk, dvs, V.st, vt, np);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0), keys = causal ? r0 + rows : tk;
      const int64_t kn = std::min(np, (keys + kKeyBlock - 1) / kKeyBlock * kKeyBlock);
      float* pb = p + r0 * np;
      float* db = ds + r0 * np;
      tiles::gemm(rows, kn, d, Q.at(b, h) + r0 * Q.st, Q.st, 1, kt, np, pb, np, alpha * avx512::kLog2e);
      for (int64_t i = 0; i < rows; ++i) exp2_shifted_row(pb + i * np, causal ? r0 + i + 1 : tk, kn, l[r0 + i]);
      if (!grads_qk) continue;
      tiles::gemm(rows, kn, dvs, dO.at(b, h) + r0 * dO.st, dO.st, 1, vt, np, db, np, 1.0f);  // dP = dO V^T
      for (int64_t i = 0; i < rows; ++i)
        rows_f32::softmax_grad_row(db + i * np, pb + i * np, kn, alpha, db + i * np, dd ? dd + r0 + i : nullptr);
      if (dq.defined()) tiles::gemm(rows, d, keys, db, np, 1, K.at(b, h), K.st, dQ.at(b, h) + r0 * dQ.st, dQ.st, 1.0f);
    }
    for (int64_t j0 = 0; j0 < tk; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, tk - j0), first = causal ? j0 : 0, later = tq - first;
      if (dv.defined())  // dV = P^T dO
        tiles::gemm(cols, dvs, later, p + first * np + j0, 1, np, dO.at(b, h) + first * dO.st, dO.st,
                    dV.at(b, h) + j0 * dV.st, dV.st, 1.0f);
      if (dk.defined())  // dK = dS^T Q
        tiles::gemm(cols, d, later, ds + first * np + j0, 1, np, Q.at(b, h) + first * Q.st, Q.st,
                    dK.at(b, h) + j0 * dK.st, dK.st, 1.0f);
    }
  });
}

// bf16 (AVX512-BF16 without AMX): the same blocks on vdpbf16ps tiles, as forward_bf16 and
// backward_bf16 run them: scores, probabilities and their gradients in f32, each row rounded
// once to bf16 for the product that reads it; the forward's P V over the pairs of keys the
// block sees, the backward's dV = P^T dO and dK = dS^T Q from each 64-key block's rows at or
// after it, through P and dS paired down their rows.

// dst[j] = src[j] rounded to bf16, for j < n (a multiple of 16).
BOOSTER_AVX512_BF16 void round_row(const float* src, bf16_t* dst, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) avx512::store16_native(dst + j, _mm512_loadu_ps(src + j));
}

void flash_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, float* lse, float alpha,
                        bool causal) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t np = round16(tk), kp = (tk + 1) / 2, ldv = round16(dv), rb = std::min(kRowBlock, tq);
  const Heads<bf16_t> Q(q), K(k), V(v), O(out);
  const int64_t bytes = Carver::bytes({rb * np * 4, rb * np * 2, d / 2 * np * 4, kp * ldv * 4});
  for_each_head(B, H, bytes, [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* s = c.take<float>(rb * np);            // a block of rows' scores in f32
    bf16_t* pb = c.take<bf16_t>(rb * np);         // their probabilities, zeros up to the block's keys
    uint32_t* kt = c.take<uint32_t>(d / 2 * np);  // k^T in pairs of d
    uint32_t* vp = c.take<uint32_t>(kp * ldv);    // v in pairs of tokens
    float* l = lse + (b * H + h) * tq;
    tiles::pack_transposed(reinterpret_cast<const float*>(K.at(b, h)), tk, d / 2, K.st / 2, reinterpret_cast<float*>(kt), np);
    avx512::pack_pairs(V.at(b, h), tk, dv, V.st, vp, ldv);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0), keys = causal ? r0 + rows : tk, kn = round16(keys);
      tiles::gemm(rows, kn, d / 2, Q.words(b, h) + r0 * (Q.st / 2), Q.st / 2, 1, kt, np, s, np, alpha * avx512::kLog2e);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t n = causal ? r0 + i + 1 : tk;
        bf16_t* pr = pb + i * np;
        l[r0 + i] = rows_bf16::softmax_row(s + i * np, n, pr, pr, false);
        std::fill(pr + round16(n), pr + kn, bf16_t{0});
      }
      tiles::gemm(rows, dv, (keys + 1) / 2, reinterpret_cast<const uint32_t*>(pb), np / 2, 1, vp, ldv,
                  O.at(b, h) + r0 * O.st, O.st, 1.0f);
    }
  });
}

void flash_backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const float* lse, const Tensor& dout,
                         const Tensor& dq, const Tensor& dk, const Tensor& dv, float alpha, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dvs = v.size(3);
  const int64_t np = round16(tk), rb = std::min(kRowBlock, tq), qp = (tq + 1) / 2, kp = (tk + 1) / 2;
  const int64_t ld = round16(d), ldv = round16(dvs);
  const Heads<bf16_t> Q(q), K(k), V(v), dO(dout), dQ(dq), dK(dk), dV(dv);
  const int64_t bytes = Carver::bytes({rb * np * 4, rb * np * 4, tq * np * 2, tq * np * 2, qp * np * 4, d / 2 * np * 4,
                                       dvs / 2 * np * 4, kp * ld * 4, qp * std::max(ld, ldv) * 4});
  for_each_head(B, H, bytes, [&](int64_t b, int64_t h, char* scratch) {
    Carver c{scratch};
    float* pf = c.take<float>(rb * np);             // a block of rows' probabilities, recomputed
    float* dpf = c.take<float>(rb * np);            // their dP
    bf16_t* P = c.take<bf16_t>(tq * np);            // the head's probabilities, rounded
    bf16_t* dS = c.take<bf16_t>(tq * np);           // alpha dS, rounded
    uint32_t* apack = c.take<uint32_t>(qp * np);    // P, then dS, paired down their rows
    uint32_t* kt = c.take<uint32_t>(d / 2 * np);    // k^T in pairs of d
    uint32_t* vt = c.take<uint32_t>(dvs / 2 * np);  // v^T in pairs of dv
    uint32_t* kpk = c.take<uint32_t>(kp * ld);      // k in pairs of tokens
    uint32_t* bpack = c.take<uint32_t>(qp * std::max(ld, ldv));  // dO, then q, in pairs of tokens
    const float* l = lse + (b * H + h) * tq;
    tiles::pack_transposed(reinterpret_cast<const float*>(K.at(b, h)), tk, d / 2, K.st / 2, reinterpret_cast<float*>(kt), np);
    tiles::pack_transposed(reinterpret_cast<const float*>(V.at(b, h)), tk, dvs / 2, V.st / 2, reinterpret_cast<float*>(vt), np);
    if (dq.defined()) avx512::pack_pairs(K.at(b, h), tk, d, K.st, kpk, ld);
    for (int64_t r0 = 0; r0 < tq; r0 += rb) {
      const int64_t rows = std::min(rb, tq - r0), keys = causal ? r0 + rows : tk;
      const int64_t kn = std::min(np, (keys + kKeyBlock - 1) / kKeyBlock * kKeyBlock);
      tiles::gemm(rows, kn, d / 2, Q.words(b, h) + r0 * (Q.st / 2), Q.st / 2, 1, kt, np, pf, np, alpha * avx512::kLog2e);
      tiles::gemm(rows, kn, dvs / 2, dO.words(b, h) + r0 * (dO.st / 2), dO.st / 2, 1, vt, np, dpf, np, 1.0f);  // dP = dO V^T
      for (int64_t i = 0; i < rows; ++i) {
        exp2_shifted_row(pf + i * np, causal ? r0 + i + 1 : tk, kn, l[r0 + i]);
        round_row(pf + i * np, P + (r0 + i) * np, kn);
        rows_bf16::softmax_grad_row(dpf + i * np, pf + i * np, kn, alpha, dS + (r0 + i) * np);
      }
      if (dq.defined())  // dQ = dS K
        tiles::gemm(rows, d, (keys + 1) / 2, reinterpret_cast<const uint32_t*>(dS + r0 * np), np / 2, 1, kpk, ld,
                    dQ.at(b, h) + r0 * dQ.st, dQ.st, 1.0f);
    }
    // Each 64-key block from the rows at or after it (a pair boundary: 64 is even).
    auto from_rows = [&](const bf16_t* a, const Heads<bf16_t>& bh, const Heads<bf16_t>& grad, int64_t width) {
      const int64_t lb = round16(width);
      avx512::pack_pairs(a, tq, tk, np, apack, np);
      avx512::pack_pairs(bh.at(b, h), tq, width, bh.st, bpack, lb);
      for (int64_t j0 = 0; j0 < tk; j0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, tk - j0), first = causal ? j0 : 0;
        tiles::gemm(cols, width, (tq - first + 1) / 2, apack + first / 2 * np + j0, 1, np, bpack + first / 2 * lb, lb,
                    grad.at(b, h) + j0 * grad.st, grad.st, 1.0f);
      }
    };
    if (dv.defined()) from_rows(P, dO, dV, dvs);  // dV = P^T dO
    if (dk.defined()) from_rows(dS, Q, dK, d);    // dK = dS^T Q
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
  if (dt == DType::f32 ? !avx512::cpu_ok() : dt != DType::bf16 || !tiles::bf16_ok()) return false;
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

void flash_attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, double alpha, bool causal) {
  if (q.dtype() == DType::bf16) flash_forward_bf16(q, k, v, out, lse.data<float>(), float(alpha), causal);
  else flash_forward_f32(q, k, v, out, lse.data<float>(), float(alpha), causal);
}

void flash_attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                                     const Tensor& delta, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv, double alpha, bool causal) {
  if (q.dtype() == DType::bf16) {
    BOOSTER_CHECK(!delta.defined(), "flash attention backward: bf16 takes <dO, O> from each row (no blocks of rows)");
    flash_backward_bf16(q, k, v, lse.data<float>(), dout, dq, dk, dv, float(alpha), causal);
  } else {
    flash_backward_f32(q, k, v, lse.data<float>(), delta.defined() ? delta.data<float>() : nullptr, dout, dq, dk, dv,
                       float(alpha), causal);
  }
}

}  // namespace booster::kernels
