// scaled_dot_product_attention: the score product, softmax and context product as one op
// whose forward and backward choose their own layouts (see ops.h).
#include <cmath>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/common/profiler.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/tensor/strided.h"

namespace booster {

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
  if (dropout_p > 0.0)
    return matmul(dropout(softmax(booster::scale(matmul(q, k.transpose(-1, -2)), alpha)), dropout_p, true), v);

  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2), dv = v.size(3);
  Tensor qd = q.detach(), kd = k.detach(), vd = v.detach();
  Tensor scores = Tensor::empty({b, h, tq, tk}, q.dtype());
  kernels::mm_into(qd, kd.transpose(-1, -2), Tensor(), scores, kernels::RightOperand::activation, alpha);
  Tensor probs;
  {
    NoGradGuard no_grad;
    probs = softmax(scores);
  }
  // The context in [B, Tq, h, dv] memory, seen as [B, h, Tq, dv].
  Tensor out = Tensor::empty({b, tq, h, dv}, q.dtype()).permute({0, 2, 1, 3});
  kernels::mm_into(probs, vd, Tensor(), out, kernels::RightOperand::activation);
  const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
  return autograd::record("attention", {q, k, v}, out, [qd, kd, vd, probs, alpha, gq, gk, gv](const std::vector<Tensor>& g) {
    using kernels::RightOperand;
    Tensor gout = g[0].detach();
    Tensor dv, dq, dk;
    if (gv) {  // dV = P^T dO
      dv = empty_same_layout(vd, vd.dtype());
      kernels::mm_into(probs.transpose(-1, -2), gout, Tensor(), dv, RightOperand::activation);
    }
    if (gq || gk) {
      // dP = dO V^T; dS = softmax'(dP); dQ = alpha dS K; dK = alpha dS^T Q
      Tensor dprobs = kernels::mm(gout, vd.transpose(-1, -2), Tensor(), probs.shape(), RightOperand::activation);
      Tensor dscores = kernels::softmax_backward(probs, dprobs).view(probs.shape());
      if (gq) {
        dq = empty_same_layout(qd, qd.dtype());
        kernels::mm_into(dscores, kd, Tensor(), dq, RightOperand::activation, alpha);
      }
      if (gk) {
        dk = empty_same_layout(kd, kd.dtype());
        kernels::mm_into(dscores.transpose(-1, -2), qd, Tensor(), dk, RightOperand::activation, alpha);
      }
    }
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace booster
