// Causal self-attention (a decoder's: token i attends to tokens 0..i), doing only the causal
// work and keeping no [T, T] matrix: the forward keeps one log-sum-exp a query and the
// backward recomputes each probability from it (FlashAttention's algorithm). On AVX-512 the
// products run on the register tiles of the own attention kernels (attention_avx512.h: a
// block of rows against only the keys it sees; bf16 widened to f32 around them, the results
// rounded once); elsewhere an online softmax in rows, heads in parallel. The reference (the
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

// One head's [T, d] rows of a [B, h, T, d] view, as f32.
std::vector<float> head_rows(const Tensor& x, int64_t b, int64_t h) {
  Tensor rows = x.select(0, b).select(0, h).to(DType::f32).contiguous();
  return std::vector<float>(rows.data<float>(), rows.data<float>() + rows.numel());
}

// Writes one head's f32 rows into a [B, h, T, d] tensor of any layout and dtype.
void put_rows(Tensor& x, int64_t b, int64_t h, const std::vector<float>& rows) {
  Tensor dst = x.select(0, b).select(0, h);
  dst.copy_(Tensor::from_vector(rows, dst.shape()).to(x.dtype()));
}

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

// The AVX-512 path: f32 operands with their last stride 1 (bf16 or other layouts copied to
// that), the outputs and gradients in the inputs' dtype.
Tensor causal_avx512(const Tensor& q, const Tensor& k, const Tensor& v, double alpha) {
  const DType dt = q.dtype();
  auto f32 = [](const Tensor& x) {
    return kernels::attention_avx512_operand_fits(x, DType::f32) ? x.detach() : x.detach().to(DType::f32).contiguous();
  };
  const Tensor qd = f32(q), kd = f32(k), vd = f32(v);
  const int64_t nb = q.size(0), nh = q.size(1), t = q.size(2), d = q.size(3);
  Tensor out = Tensor::empty({nb, t, nh, d}).permute({0, 2, 1, 3});  // heads merge by a view
  Tensor lse = Tensor::empty({nb, nh, t});
  kernels::causal_attention_forward_avx512(qd, kd, vd, out, lse, alpha);
  const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
  return autograd::record("causal_attention", {q, k, v}, out.to(dt), [qd, kd, vd, lse, alpha, dt, gq, gk, gv](const std::vector<Tensor>& g) {
    Tensor gout = g[0].detach();
    if (!kernels::attention_avx512_operand_fits(gout, DType::f32)) gout = gout.to(DType::f32).contiguous();
    // Laid out as q, k and v are (split from one stacked projection, their gradients are the
    // pieces of one again, which its backward reads in place).
    std::vector<Tensor> grads = empty_same_layouts({gq ? qd : Tensor(), gk ? kd : Tensor(), gv ? vd : Tensor()}, DType::f32);
    kernels::causal_attention_backward_avx512(qd, kd, vd, lse, gout, grads[0], grads[1], grads[2], alpha);
    for (auto& x : grads)
      if (x.defined() && dt != DType::f32) x = x.to(dt);
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
  if (dropout_p > 0.0 || kernels::use_reference()) return causal_composite(q, k, v, dropout_p, alpha);
  if (kernels::avx512::cpu_ok() && (q.dtype() == DType::f32 || q.dtype() == DType::bf16)) return causal_avx512(q, k, v, alpha);
  const int64_t nb = q.size(0), nh = q.size(1), t = q.size(2), d = q.size(3);
  Tensor qd = q.detach(), kd = k.detach(), vd = v.detach();
  Tensor out = Tensor::empty({nb, t, nh, d}, q.dtype()).permute({0, 2, 1, 3});  // heads merge by a view
  Tensor lse = Tensor::empty({nb, nh, t});                                        // log-sum-exp a query
  const float a = float(alpha);
#pragma omp parallel for schedule(dynamic) collapse(2)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h) {
      const auto qr = head_rows(qd, b, h), kr = head_rows(kd, b, h), vr = head_rows(vd, b, h);
      std::vector<float> o(static_cast<size_t>(t * d), 0.0f), s(static_cast<size_t>(t));
      float* l = lse.data<float>() + (b * nh + h) * t;
      for (int64_t i = 0; i < t; ++i) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) m = std::max(m, s[size_t(j)] = a * dot(&qr[size_t(i * d)], &kr[size_t(j * d)], d));
        float sum = 0;
        float* oi = &o[size_t(i * d)];
        for (int64_t j = 0; j <= i; ++j) {
          const float p = std::exp(s[size_t(j)] - m);
          sum += p;
          const float* vj = &vr[size_t(j * d)];
          for (int64_t c = 0; c < d; ++c) oi[c] += p * vj[c];
        }
        for (int64_t c = 0; c < d; ++c) oi[c] /= sum;
        l[i] = m + std::log(sum);
      }
      put_rows(out, b, h, o);
    }
  return autograd::record("causal_attention", {q, k, v}, out, [qd, kd, vd, out, lse, a](const std::vector<Tensor>& g) {
    const int64_t nb = qd.size(0), nh = qd.size(1), t = qd.size(2), d = qd.size(3);
    Tensor gout = g[0].detach(), od = out.detach();
    Tensor dq = Tensor::empty(qd.shape(), qd.dtype()), dk = Tensor::empty(kd.shape(), kd.dtype()),
           dv = Tensor::empty(vd.shape(), vd.dtype());
#pragma omp parallel for schedule(dynamic) collapse(2)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t h = 0; h < nh; ++h) {
        const auto qr = head_rows(qd, b, h), kr = head_rows(kd, b, h), vr = head_rows(vd, b, h);
        const auto gr = head_rows(gout, b, h), orow = head_rows(od, b, h);
        std::vector<float> gq(static_cast<size_t>(t * d), 0.0f), gk(gq), gv(gq);
        const float* l = lse.data<float>() + (b * nh + h) * t;
        for (int64_t i = 0; i < t; ++i) {
          const float* qi = &qr[size_t(i * d)];
          const float* doi = &gr[size_t(i * d)];
          const float di = dot(doi, &orow[size_t(i * d)], d);  // D_i = dO_i . O_i
          float* dqi = &gq[size_t(i * d)];
          for (int64_t j = 0; j <= i; ++j) {
            const float* kj = &kr[size_t(j * d)];
            const float p = std::exp(a * dot(qi, kj, d) - l[i]);
            const float ds = p * (dot(doi, &vr[size_t(j * d)], d) - di) * a;
            float* dvj = &gv[size_t(j * d)];
            float* dkj = &gk[size_t(j * d)];
            for (int64_t c = 0; c < d; ++c) {
              dvj[c] += p * doi[c];
              dqi[c] += ds * kj[c];
              dkj[c] += ds * qi[c];
            }
          }
        }
        put_rows(dq, b, h, gq);
        put_rows(dk, b, h, gk);
        put_rows(dv, b, h, gv);
      }
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace booster
