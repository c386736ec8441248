// scaled_dot_product_attention: the score product, softmax and context product as one op
// whose forward and backward choose their own layouts (see ops.h).
#include <algorithm>
#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/attention_avx512.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/tensor/strided.h"

namespace booster {
namespace {

// Bytes of scores one pass of the batched (oneDNN) path holds. At ViT-B shapes (12 heads, 197
// tokens, batch 8; 2 threads, Zen-5 class, forward and backward alternated in one process, 40
// rounds' medians): passes of at most 4-8 MB took 15.3 ms in f32 against 16.0 for the whole
// batch at once (15 MB of scores) and 16.1 for 2 MB; in bf16 the whole batch's 7.5 MB in one
// pass was fastest (9.4 ms; 4 MB passes 9.8). Past the L2s the shared L3 still holds a pass.
constexpr int64_t kScoresPassBytes = int64_t(1) << 23;

// Images whose scores [h, Tq, Tk] fit one pass (at least one).
int64_t images_per_pass(int64_t h, int64_t tq, int64_t tk, DType dt) {
  const int64_t per_image = std::max<int64_t>(1, h * tq * tk * int64_t(dtype_size(dt)));
  return std::max<int64_t>(1, kScoresPassBytes / per_image);
}

}  // namespace

// q, k: [B, h, Tq|Tk, d], v: [B, h, Tk, dv] -> [B, h, Tq, dv]
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                                    std::optional<double> scale) {
  ProfileScope prof_("attention");
  kernels::check_same_dtype("scaled_dot_product_attention", {&q, &k, &v});
  kernels::check_floating("scaled_dot_product_attention", q);
  BOOSTER_CHECK_T(ShapeError,
                  q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2) &&
                      q.size(0) == k.size(0) && k.size(0) == v.size(0) && q.size(1) == k.size(1) && k.size(1) == v.size(1),
                  "scaled_dot_product_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
                  shape_str(v.shape()), " do not fit (need [B, h, Tq, d], [B, h, Tk, d], [B, h, Tk, dv])");
  BOOSTER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "scaled_dot_product_attention: dropout_p ", dropout_p,
                " outside [0, 1)");
  const double alpha = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  if (dropout_p > 0.0 || !kernels::fused_kernels().attention) {  // the plain ops
    Tensor p = softmax(booster::scale(matmul(q, k.transpose(-1, -2)), alpha));
    return matmul(dropout_p > 0.0 ? dropout(p, dropout_p, true) : p, v);
  }

  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2), dv = v.size(3);
  const int64_t step = images_per_pass(h, tq, tk, q.dtype());
  Tensor qd = q.detach(), kd = k.detach(), vd = v.detach();
  using kernels::RightOperand;
  // The scores become the probabilities in place, a pass of images at a time, and the
  // context product reads them while they are still in cache.
  Tensor probs = Tensor::empty({b, h, tq, tk}, q.dtype());
  // The context in [B, Tq, h, dv] memory, seen as [B, h, Tq, dv].
  Tensor out = Tensor::empty({b, tq, h, dv}, q.dtype()).permute({0, 2, 1, 3});
  // f32 and bf16 on AVX-512: a head at a time on the own kernels (attention_avx512.h).
  const bool own = !kernels::use_reference() && kernels::attention_avx512_fits(qd, kd, vd);
  if (own) kernels::attention_forward_avx512(qd, kd, vd, probs, out, alpha);
  for (int64_t b0 = 0; b0 < b && !own; b0 += step) {
    const int64_t n = std::min(step, b - b0);
    Tensor p = probs.narrow(0, b0, n);
    // The scale as a pass of its own, not oneDNN's output scale: with one, its bf16 matmul
    // left the AMX kernels for gemm:jit (ViT-S scores 16.5 ms against 5.2 on the AMX Xeon).
    kernels::mm_into(qd.narrow(0, b0, n), kd.narrow(0, b0, n).transpose(-1, -2), Tensor(), p, RightOperand::activation);
    kernels::scale_(p, alpha);
    kernels::softmax_(p);
    kernels::mm_into(p, vd.narrow(0, b0, n), Tensor(), out.narrow(0, b0, n), RightOperand::activation);
  }
  const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
  return autograd::record("attention", {q, k, v}, out, [qd, kd, vd, probs, alpha, gq, gk, gv, step, own](const std::vector<Tensor>& g) {
    Tensor gout = g[0].detach();
    const int64_t b = probs.size(0);
    // Laid out as q, k and v are: split from one stacked projection (stacked_linear), their
    // gradients are again the pieces of one, which that projection's backward reads in place.
    std::vector<Tensor> grads =
        empty_same_layouts({gq ? qd : Tensor(), gk ? kd : Tensor(), gv ? vd : Tensor()}, qd.dtype());
    Tensor dq = grads[0], dk = grads[1], dv = grads[2];
    if (own) {
      if (!kernels::attention_avx512_operand_fits(gout, qd.dtype())) gout = gout.to(qd.dtype()).contiguous();
      kernels::attention_backward_avx512(qd, kd, vd, probs, gout, dq, dk, dv, alpha);
      return std::vector<Tensor>{dq, dk, dv};
    }
    // One pass's score gradients, reused by every pass (in cache from product to product).
    Tensor ds_pass = gq || gk ? Tensor::empty({std::min(step, b), probs.size(1), probs.size(2), probs.size(3)}, probs.dtype())
                              : Tensor();
    for (int64_t b0 = 0; b0 < b; b0 += step) {
      const int64_t n = std::min(step, b - b0);
      Tensor p = probs.narrow(0, b0, n), go = gout.narrow(0, b0, n);
      if (gv)  // dV = P^T dO
        kernels::mm_into(p.transpose(-1, -2), go, Tensor(), dv.narrow(0, b0, n), RightOperand::activation);
      if (!gq && !gk) continue;
      // dP = dO V^T; dS = softmax'(dP) in place; dQ = alpha dS K; dK = alpha dS^T Q
      Tensor ds = ds_pass.narrow(0, 0, n);
      kernels::mm_into(go, vd.narrow(0, b0, n).transpose(-1, -2), Tensor(), ds, RightOperand::activation);
      kernels::softmax_backward_into(p, ds, ds);
      kernels::scale_(ds, alpha);  // once for both products (see the forward)
      if (gq) kernels::mm_into(ds, kd.narrow(0, b0, n), Tensor(), dq.narrow(0, b0, n), RightOperand::activation);
      if (gk)
        kernels::mm_into(ds.transpose(-1, -2), qd.narrow(0, b0, n), Tensor(), dk.narrow(0, b0, n),
                         RightOperand::activation);
    }
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace booster
