// The fused Adam update (see adam.h). Scalars follow PyTorch's order of operations:
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "core/common/parallel.h"

namespace booster::optim {

AdamBase::AdamBase(std::string type, std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(type), std::move(groups), {{"lr", o.lr},
                                    {"beta1", o.beta1},
                                    {"beta2", o.beta2},
                                    {"eps", o.eps},
                                    {"weight_decay", o.weight_decay},
                                    {"bias_correction", o.bias_correction ? 1.0 : 0.0}}),
      decoupled_(decoupled) {
  BOOSTER_CHECK(o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0, "Adam: lr, eps and weight_decay must be >= 0");
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
  const float step_size = float(lr / bc1), f_b1 = float(b1), f_b2 = float(b2), f_1mb1 = float(1 - b1),
              f_1mb2 = float(1 - b2), f_eps = float(eps), f_bc2 = float(bc2_sqrt),
              l2_wd = decoupled_ ? 0.f : float(wd), decay = decoupled_ ? float(1 - lr * wd) : 1.f,
              inv_div = float(1.0 / grad_divisor_);
  float* __restrict pp = p.data<float>();
  float* __restrict pm = m.data<float>();
  float* __restrict pv = v.data<float>();
  // One pass over memory: a low-precision gradient is widened and the compute copy written
  // block by block, while the block is in cache (no f32 gradient, no second pass).
  const DType gdt = g.dtype(), wdt = working.defined() ? working.dtype() : DType::f32;
  const char* graw = static_cast<const char*>(g.raw_data());
  char* wraw = working.defined() ? static_cast<char*>(working.raw_data()) : nullptr;
  const size_t gsz = dtype_size(gdt), wsz = dtype_size(wdt);
  parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 2048;
    alignas(64) float gbuf[kBlock];
    for (int64_t o = b; o < e; o += kBlock) {
      const int64_t len = std::min(kBlock, e - o);
      const float* __restrict pg = reinterpret_cast<const float*>(graw) + o;
      if (gdt != DType::f32) {
        convert_serial(graw + size_t(o) * gsz, gdt, gbuf, DType::f32, len);
        pg = gbuf;
      }
      float* __restrict bp = pp + o;
      float* __restrict bm = pm + o;
      float* __restrict bv = pv + o;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) {
        const float gi = pg[i] * inv_div + l2_wd * bp[i];
        const float mi = bm[i] * f_b1 + f_1mb1 * gi;
        const float vi = bv[i] * f_b2 + f_1mb2 * gi * gi;
        bm[i] = mi;
        bv[i] = vi;
        bp[i] = bp[i] * decay - step_size * (mi / (std::sqrt(vi) / f_bc2 + f_eps));
      }
      if (wraw) convert_serial(bp, DType::f32, wraw + size_t(o) * wsz, wdt, len);
    }
  });
  (void)name;
}

}  // namespace booster::optim
