// Causal self-attention (a decoder's: token i attends to tokens 0..i), doing only the causal
// work and keeping no [T, T] matrix: the forward keeps one log-sum-exp a query and the
// backward recomputes each probability from it (FlashAttention's algorithm). On AVX-512 the
// products run on the register tiles of the own attention kernels (attention_avx512.h: a
// block of rows against only the keys it sees; bf16 on vdpbf16ps where the CPU has
// AVX512-BF16 and no AMX, else widened to f32 around them, the results rounded once);
// elsewhere an online softmax in rows, heads in parallel. The reference (the
// test oracle, and the path with attention dropout) is the composite of the score product, a
// -inf mask above the diagonal, softmax, dropout and the context product.
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/attention_avx512.h"
#include "core/kernels/avx512_cpu.h"
#include "core/tensor/strided.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"

namespace booster {
namespace {

inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0;
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

// The composite: masked scores, softmax, dropout, context (the oracle).
Tensor causal_composite(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, double alpha) {
  const int64_t t = q.size(2);
  std::vector<float> mask(size_t(t * t), 0.0f);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = i + 1; j < t; ++j) mask[size_t(i * t + j)] = -std::numeric_limits<float>::infinity();
  Tensor m = Tensor::from_vector(mask, {t, t}, q.dtype());
  Tensor p = softmax(add(scale(matmul(q, k.transpose(-1, -2)), alpha), m));
  if (dropout_p > 0) p = dropout(p, dropout_p, true);
  return matmul(p, v);
}

// The AVX-512 path: operands with their last stride 1 (other layouts copied to that) in f32,
// or in bf16 where the bf16 kernels run (AVX512-BF16 without AMX; elsewhere bf16 is widened to
// f32 around the f32 kernels, the results rounded once); the outputs and gradients in the
// inputs' dtype.
Tensor causal_avx512(const Tensor& q, const Tensor& k, const Tensor& v, double alpha) {
  const DType dt = q.dtype();
  const DType kt = dt == DType::bf16 && kernels::attention_avx512_fits(q, k, v) ? DType::bf16 : DType::f32;
  auto as_kernel = [kt](const Tensor& x) {
    return kernels::attention_avx512_operand_fits(x, kt) ? x.detach() : x.detach().to(kt).contiguous();
  };
  const Tensor qd = as_kernel(q), kd = as_kernel(k), vd = as_kernel(v);
  const int64_t nb = q.size(0), nh = q.size(1), t = q.size(2), d = q.size(3);
  Tensor out = Tensor::empty({nb, t, nh, d}, kt).permute({0, 2, 1, 3});  // heads merge by a view
  Tensor lse = Tensor::empty({nb, nh, t});
  kernels::flash_attention_forward_avx512(qd, kd, vd, out, lse, alpha, true);
  const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
  return autograd::record("causal_attention", {q, k, v}, out.to(dt), [qd, kd, vd, lse, alpha, dt, kt, gq, gk, gv](const std::vector<Tensor>& g) {
    Tensor gout = g[0].detach();
    if (!kernels::attention_avx512_operand_fits(gout, kt)) gout = gout.to(kt).contiguous();
    // Laid out as q, k and v are (split from one stacked projection, their gradients are the
    // pieces of one again, which its backward reads in place).
    std::vector<Tensor> grads = empty_same_layouts({gq ? qd : Tensor(), gk ? kd : Tensor(), gv ? vd : Tensor()}, kt);
    kernels::flash_attention_backward_avx512(qd, kd, vd, lse, Tensor(), gout, grads[0], grads[1], grads[2], alpha, true);
    for (auto& x : grads)
      if (x.defined()) x = x.to(dt);
    return grads;
  });
}

}  // namespace

// q, k, v: [B, h, T, d] -> [B, h, T, d]
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, std::optional<double> scale_) {
  ProfileScope prof_("causal attention");
  kernels::check_same_dtype("causal_attention", {&q, &k, &v});
  kernels::check_floating("causal_attention", q);
  BOOSTER_CHECK_T(ShapeError, q.dim() == 4 && q.shape() == k.shape() && k.shape() == v.shape(), "causal_attention: q ",
                  shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
                  " must all be [B, h, T, d]");
  BOOSTER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "causal_attention: dropout_p ", dropout_p, " outside [0, 1)");
  const double alpha = scale_.value_or(1.0 / std::sqrt(double(q.size(-1))));
  if (dropout_p > 0.0 || kernels::use_reference() || !kernels::fused_kernels().attention)
    return causal_composite(q, k, v, dropout_p, alpha);
  if (kernels::avx512::cpu_ok() && (q.dtype() == DType::f32 || q.dtype() == DType::bf16)) return causal_avx512(q, k, v, alpha);
  // Elsewhere: the reference rows of the blocks below, the sequence one causal block.
  const AttentionBlock blk = attention_block_forward(q, k, v, true, alpha);
  const Tensor qd = q.detach(), kd = k.detach(), vd = v.detach();
  const DType dt = q.dtype();
  return autograd::record("causal_attention", {q, k, v}, blk.out.to(dt), [qd, kd, vd, blk, alpha, dt](const std::vector<Tensor>& g) {
    const Tensor delta = sum(mul(g[0].detach().to(DType::f32), blk.out), {3});  // <dO, O> a query
    std::vector<Tensor> grads = attention_block_backward(qd, kd, vd, g[0], blk.lse, delta, true, alpha);
    for (auto& x : grads) x = x.to(dt);
    return grads;
  });
}

namespace {

// Rows of query i see keys [0, seen(i)).
inline int64_t seen(bool causal, int64_t i, int64_t tk) { return causal ? i + 1 : tk; }

// A head's dropout factors: 0 for a dropped probability, 1 / (1 - p) for a kept one (1 without dropout).
struct HeadDropout {
  const BlockDropout& d;
  Generator gen;
  int64_t head;
  HeadDropout(const BlockDropout& drop, int64_t bh) : d(drop), gen(drop.seed), head(bh) {}
  float factor(int64_t i, int64_t j) const {
    if (d.p <= 0) return 1.0f;
    const uint64_t c = uint64_t((head * d.rows + d.row_offset + i) * d.keys + d.key_offset + j);
    return double(gen.at(c) >> 11) * 0x1.0p-53 < d.p ? 0.0f : float(1.0 / (1.0 - d.p));
  }
};

// The reference block forward: one head's rows, an online softmax over each row's keys.
void block_forward_rows(const float* q, const float* k, const float* v, int64_t tq, int64_t tk, int64_t d, bool causal,
                        float a, const HeadDropout& drop, float* o, float* lse) {
  std::vector<float> s(static_cast<size_t>(tk));
  for (int64_t i = 0; i < tq; ++i) {
    const int64_t n = seen(causal, i, tk);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, s[size_t(j)] = a * dot(q + i * d, k + j * d, d));
    float sum = 0;
    float* oi = o + i * d;
    std::fill(oi, oi + d, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(s[size_t(j)] - m), kept = p * drop.factor(i, j);
      sum += p;
      for (int64_t c = 0; c < d; ++c) oi[c] += kept * v[j * d + c];
    }
    for (int64_t c = 0; c < d; ++c) oi[c] /= sum;
    lse[i] = m + std::log(sum);
  }
}

// The reference block backward: p = exp(a q.k - lse), f its dropout factor, dS = p (f dO.v - delta) a.
void block_backward_rows(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                         const float* delta, int64_t tq, int64_t tk, int64_t d, bool causal, float a,
                         const HeadDropout& drop, float* dq, float* dk, float* dv) {
  std::fill(dq, dq + tq * d, 0.0f);
  std::fill(dk, dk + tk * d, 0.0f);
  std::fill(dv, dv + tk * d, 0.0f);
  for (int64_t i = 0; i < tq; ++i) {
    const float* qi = q + i * d;
    const float* doi = dout + i * d;
    for (int64_t j = 0; j < seen(causal, i, tk); ++j) {
      const float* kj = k + j * d;
      const float p = std::exp(a * dot(qi, kj, d) - lse[i]), f = drop.factor(i, j);
      const float ds = p * (f * dot(doi, v + j * d, d) - delta[i]) * a;
      for (int64_t c = 0; c < d; ++c) {
        dv[j * d + c] += p * f * doi[c];
        dq[i * d + c] += ds * kj[c];
        dk[j * d + c] += ds * qi[c];
      }
    }
  }
}

Tensor f32_contiguous(const Tensor& x) { return x.detach().to(DType::f32).contiguous(); }

void check_block(const char* who, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  BOOSTER_CHECK_T(ShapeError, q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && q.size(0) == k.size(0) &&
                                  q.size(1) == k.size(1) && q.size(3) == k.size(3) && (!causal || q.size(2) == k.size(2)),
                  who, ": q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
                  " must be [B, h, Tq, d] and [B, h, Tk, d]", causal ? " with Tq == Tk (causal)" : "");
}

}  // namespace

AttentionBlock attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double alpha,
                                       const BlockDropout& dropout) {
  ProfileScope prof_("attention block");
  check_block("attention_block_forward", q, k, v, causal);
  const Tensor qd = f32_contiguous(q), kd = f32_contiguous(k), vd = f32_contiguous(v);
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3);
  AttentionBlock r{Tensor::empty({nb, nh, tq, d}), Tensor::empty({nb, nh, tq})};
  if (kernels::avx512::cpu_ok() && !kernels::use_reference() && dropout.p <= 0) {
    kernels::flash_attention_forward_avx512(qd, kd, vd, r.out, r.lse, alpha, causal);
    r.lse = scale(r.lse, std::log(2.0));  // log2 units -> natural
    return r;
  }
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t hq = (b * nh + h) * tq, hk = (b * nh + h) * tk;
      block_forward_rows(qd.data<float>() + hq * d, kd.data<float>() + hk * d, vd.data<float>() + hk * d, tq, tk, d,
                         causal, float(alpha), HeadDropout(dropout, b * nh + h), r.out.data<float>() + hq * d,
                         r.lse.data<float>() + hq);
    }
  return r;
}

std::vector<Tensor> attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                             const Tensor& lse, const Tensor& delta, bool causal, double alpha,
                                             const BlockDropout& dropout) {
  ProfileScope prof_("attention block");
  check_block("attention_block_backward", q, k, v, causal);
  const Tensor qd = f32_contiguous(q), kd = f32_contiguous(k), vd = f32_contiguous(v), gd = f32_contiguous(dout);
  const Tensor ld = f32_contiguous(lse), dd = f32_contiguous(delta);
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3);
  std::vector<Tensor> g{Tensor::empty(qd.shape()), Tensor::empty(kd.shape()), Tensor::empty(vd.shape())};
  if (kernels::avx512::cpu_ok() && !kernels::use_reference() && dropout.p <= 0) {
    const Tensor l2 = scale(ld, 1.0 / std::log(2.0)).contiguous();  // natural -> log2 units
    kernels::flash_attention_backward_avx512(qd, kd, vd, l2, dd, gd, g[0], g[1], g[2], alpha, causal);
    return g;
  }
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t hq = (b * nh + h) * tq, hk = (b * nh + h) * tk;
      block_backward_rows(qd.data<float>() + hq * d, kd.data<float>() + hk * d, vd.data<float>() + hk * d,
                          gd.data<float>() + hq * d, ld.data<float>() + hq, dd.data<float>() + hq, tq, tk, d, causal,
                          float(alpha), HeadDropout(dropout, b * nh + h), g[0].data<float>() + hq * d, g[1].data<float>() + hk * d,
                          g[2].data<float>() + hk * d);
    }
  return g;
}

}  // namespace booster
