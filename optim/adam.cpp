// The fused Adam update (see adam.h), rounding as PyTorch's single-tensor Adam / AdamW do on
// the CPU, operation for operation (measured bit-identical to torch 1.13's torch.optim.AdamW
// in fp32; tests/optim/golden):
//   Adam:  g = fma(p, wd, g)                   grad.add(param, alpha=weight_decay)
//   AdamW: p = p * (1 - lr wd)                 param.mul_(1 - lr * weight_decay)
//   m = fma(g, 1 - b1, m * b1)                 exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   v = fma((1 - b2) g, g, v * b2)             exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   p = p + (-lr / bc1 * m) / (sqrt(v) / sqrt(bc2) + eps)   param.addcdiv_(exp_avg, denom, value=-step_size)
// The file is compiled without contraction (-ffp-contract=off): every fused multiply-add is
// one PyTorch's kernels make, written as std::fma; nothing else is fused (p * decay + ... was,
// and moved AdamW off PyTorch by up to 3.4e-5 after four steps where gradients are near zero).
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "core/common/parallel.h"

namespace booster::optim {

namespace {

struct Scalars {
  float neg_step_size, b1, b2, one_minus_b1, one_minus_b2, eps, bc2, l2_wd, decay, inv_div;
};

inline float widen(float x) { return x; }
inline float widen(bf16_t x) { return from_bf16(x); }

// The update of n elements in one vectorized loop, from gradients g (f32 or bf16); with Copy
// it also writes the compute copy w (bf16) of each new value.
// Built for the AVX2 floor and for AVX-512, picked at load time: the same IEEE operations
// (the same FMAs in both), so the same bits.
template <bool Copy, typename G>
__attribute__((target_clones("arch=x86-64-v4", "default"))) void fused_rows(
    const G* __restrict g, float* __restrict p, float* __restrict m, float* __restrict v, bf16_t* __restrict w,
    int64_t n, const Scalars& k) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = std::fma(p[i], k.l2_wd, widen(g[i]) * k.inv_div);  // l2_wd 0 (AdamW): g exactly
    const float pi = p[i] * k.decay;                                     // decay 1 (Adam): p exactly
    const float mi = std::fma(gi, k.one_minus_b1, m[i] * k.b1);
    const float vi = std::fma(k.one_minus_b2 * gi, gi, v[i] * k.b2);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2 + k.eps;
    p[i] = pi + (k.neg_step_size * mi) / denom;
    if constexpr (Copy) w[i] = to_bf16(p[i]);
  }
}

}  // namespace

AdamBase::AdamBase(std::string type, std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(type), std::move(groups), {{"lr", o.lr},
                                    {"beta1", o.beta1},
                                    {"beta2", o.beta2},
                                    {"eps", o.eps},
                                    {"weight_decay", o.weight_decay},
                                    {"bias_correction", o.bias_correction ? 1.0 : 0.0}}),
      decoupled_(decoupled) {
  BOOSTER_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam: betas must be in [0, 1), got (",
                o.beta1, ", ", o.beta2, ")");
}

void AdamBase::update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                      const Tensor& working) {
  Tensor& m = st.buffers["exp_avg"];
  Tensor& v = st.buffers["exp_avg_sq"];
  if (!m.defined()) m = Tensor::zeros(p.shape());
  if (!v.defined()) v = Tensor::zeros(p.shape());
  const double lr = group.get("lr"), b1 = group.get("beta1"), b2 = group.get("beta2"), eps = group.get("eps");
  const double wd = group.get("weight_decay");
  const bool bc = group.get("bias_correction") != 0.0;
  const double bc1 = bc ? 1 - std::pow(b1, double(st.step)) : 1.0;
  const double bc2_sqrt = bc ? std::sqrt(1 - std::pow(b2, double(st.step))) : 1.0;
  // Branch-free body (so it vectorizes): L2 decay adds l2_wd * p to g (0 for AdamW), the
  // decoupled decay multiplies p by `decay` (1 for Adam).
  const Scalars k{float(-(lr / bc1)), float(b1), float(b2), float(1 - b1), float(1 - b2), float(eps), float(bc2_sqrt),
                  decoupled_ ? 0.f : float(wd), decoupled_ ? float(1 - lr * wd) : 1.f, float(1.0 / grad_divisor_)};
  float* pp = p.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  // One pass over memory: a low-precision gradient is widened and the compute copy written
  // in the same loop (no f32 gradient, no second pass).
  const DType gdt = g.dtype(), wdt = working.defined() ? working.dtype() : DType::f32;
  const char* graw = static_cast<const char*>(g.raw_data());
  char* wraw = working.defined() ? static_cast<char*>(working.raw_data()) : nullptr;
  auto* g32 = reinterpret_cast<const float*>(graw);
  auto* g16 = reinterpret_cast<const bf16_t*>(graw);
  auto* w16 = reinterpret_cast<bf16_t*>(wraw);
  const bool bf16_in = gdt == DType::bf16, f32_in = gdt == DType::f32;
  if ((f32_in || bf16_in) && (!wraw || wdt == DType::bf16)) {
    parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      if (f32_in && !wraw) fused_rows<false>(g32 + b, pp + b, pm + b, pv + b, nullptr, e - b, k);
      else if (f32_in) fused_rows<true>(g32 + b, pp + b, pm + b, pv + b, w16 + b, e - b, k);
      else if (!wraw) fused_rows<false>(g16 + b, pp + b, pm + b, pv + b, nullptr, e - b, k);
      else fused_rows<true>(g16 + b, pp + b, pm + b, pv + b, w16 + b, e - b, k);
    });
    return;
  }
  // Other dtypes (f16): the gradient widened and the copy narrowed a cache-sized block at a
  // time, around the same element update.
  const size_t gsz = dtype_size(gdt), wsz = dtype_size(wdt);
  parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 2048;
    alignas(64) float gbuf[kBlock];
    for (int64_t o = b; o < e; o += kBlock) {
      const int64_t len = std::min(kBlock, e - o);
      const float* pg = g32 + o;
      if (gdt != DType::f32) {
        convert_serial(graw + size_t(o) * gsz, gdt, gbuf, DType::f32, len);
        pg = gbuf;
      }
      fused_rows<false>(pg, pp + o, pm + o, pv + o, nullptr, len, k);
      if (wraw) convert_serial(pp + o, DType::f32, wraw + size_t(o) * wsz, wdt, len);
    }
  });
  (void)name;
}

}  // namespace booster::optim
