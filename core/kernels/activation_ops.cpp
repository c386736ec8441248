// GELU: the exact form with its derivative in one AVX-512 pass where the CPU has it
// (gelu_avx512.h), else on oneDNN's eltwise primitives (erf or tanh form); and dropout with
// a counter-based mask (the same mask for any thread count); SiLU (LLaMA's MLP).
#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/gelu_avx512.h"
#include "core/kernels/raw.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/reference.h"

namespace booster {
namespace kernels {
namespace {

dnnl::algorithm gelu_alg(bool tanh_approx) {
  return tanh_approx ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf;
}

dnnl::eltwise_forward::primitive_desc gelu_fwd_pd(const dnnl::memory::desc& md, bool tanh_approx) {
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_training, gelu_alg(tanh_approx), md, 0.f, 0.f);
  return dnnl::eltwise_forward::primitive_desc(d, user_scratchpad_attr(), cpu_engine());
}

const CachedPrimitive& gelu_fwd_prim(const Tensor& x, bool tanh_approx) {
  KeyBuilder key("gelu_fwd");
  key.add(x).add(int64_t(tanh_approx));
  return cached_primitive(key.str(), [&] {
    auto pd = gelu_fwd_pd(md_of(x), tanh_approx);
    return std::make_pair(dnnl::primitive(dnnl::eltwise_forward(pd)), dnnl::primitive_desc_base(pd));
  });
}

void gelu_fast(const Tensor& x, const Tensor& y, bool tanh_approx) {
  execute(gelu_fwd_prim(x, tanh_approx), {{DNNL_ARG_SRC, mem_of(md_of(x), x)}, {DNNL_ARG_DST, mem_of(md_of(y), y)}});
}

// dx = gelu'(x) * dy in x's dtype; false when oneDNN has no kernel for that dtype.
bool gelu_bwd_fast(const Tensor& x, const Tensor& dy, const Tensor& dx, bool tanh_approx) {
  KeyBuilder key("gelu_bwd");
  key.add(x).add(int64_t(tanh_approx));
  const auto& cp = cached_primitive(key.str(), [&] {
    auto hint = gelu_fwd_pd(md_of(x), tanh_approx);
    dnnl::eltwise_backward::desc d(gelu_alg(tanh_approx), md_of(x), md_of(x), 0.f, 0.f);
    dnnl::eltwise_backward::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
    return std::make_pair(dnnl::primitive(dnnl::eltwise_backward(pd)), dnnl::primitive_desc_base(pd));
  });
  if (!cp.native()) return false;
  execute(cp, {{DNNL_ARG_SRC, mem_of(md_of(x), x)},
                     {DNNL_ARG_DIFF_DST, mem_of(md_of(dy), dy)},
                     {DNNL_ARG_DIFF_SRC, mem_of(md_of(dx), dx)}});
  return true;
}

}  // namespace
}  // namespace kernels

// x: any shape -> same shape
Tensor gelu(const Tensor& x, const std::string& approximate) {
  ProfileScope prof_("gelu");
  kernels::check_floating("gelu", x);
  BOOSTER_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
                approximate, "\"");
  const bool tanh_approx = approximate == "tanh", ref = kernels::use_reference();
  const DType dt = x.dtype();
  if (!ref && !tanh_approx && (dt == DType::f32 || dt == DType::bf16) && kernels::avx512::cpu_ok()) {
    // y and y' in one pass; the backward multiplies by y' (kept in x's dtype, in place of x).
    Tensor xs = x.detach().contiguous();
    Tensor y = Tensor::empty(x.shape(), dt), d = Tensor::empty(x.shape(), dt);
    if (dt == DType::f32) kernels::gelu_with_grad(xs.data<float>(), y.data<float>(), d.data<float>(), xs.numel());
    else kernels::gelu_with_grad(xs.data<bf16_t>(), y.data<bf16_t>(), d.data<bf16_t>(), xs.numel());
    return autograd::record("gelu", {x}, y, [d](const std::vector<Tensor>& g) {
      // In place when nothing else holds the incoming gradient (no output to allocate and
      // fetch for ownership: one stream of the pass fewer); a graph being built needs mul.
      if (!autograd::GradMode::enabled() && g[0].dtype() == d.dtype() && g[0].is_contiguous() && g[0].is_sole_owner()) {
        Tensor dx = g[0];
        kernels::mul_(dx, d);
        return std::vector<Tensor>{dx};
      }
      return std::vector<Tensor>{mul(g[0].to(d.dtype()), d)};
    });
  }
  // In x's own dtype where oneDNN has a kernel for it (bf16 on AVX512-BF16/AMX: no
  // conversions, half the traffic; it computes in f32 inside), else staged through f32.
  Tensor xs = kernels::contig_as(x, ref ? DType::f32 : x.dtype());
  if (!ref && xs.dtype() != DType::f32 && !kernels::gelu_fwd_prim(xs, tanh_approx).native()) xs = kernels::f32_contig(x);
  Tensor y = Tensor::empty(x.shape(), xs.dtype());
  if (ref) kernels::ref::gelu_fwd(xs.data<float>(), y.data<float>(), xs.numel(), tanh_approx);
  else kernels::gelu_fast(xs, y, tanh_approx);
  return autograd::record("gelu", {x}, y.to(dt), [xs, tanh_approx, ref, dt](const std::vector<Tensor>& g) {
    Tensor dy = kernels::contig_as(g[0], xs.dtype());
    Tensor dx = Tensor::empty(xs.shape(), xs.dtype());
    if (ref) {
      kernels::ref::gelu_bwd(xs.data<float>(), dy.data<float>(), dx.data<float>(), xs.numel(), tanh_approx);
    } else if (!kernels::gelu_bwd_fast(xs, dy, dx, tanh_approx)) {  // no low-precision backward kernel
      dx = Tensor::empty(xs.shape());
      BOOSTER_CHECK_T(BackendError, kernels::gelu_bwd_fast(kernels::f32_contig(xs), kernels::f32_contig(dy), dx, tanh_approx),
                      "gelu backward: oneDNN has no f32 kernel");
    }
    return std::vector<Tensor>{dx.to(dt)};
  });
}

// x: any shape -> same shape; element i kept with probability 1-p, scaled by 1/(1-p)
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  ProfileScope prof_("dropout");
  kernels::check_floating("dropout", x);
  BOOSTER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  const int64_t n = x.numel();
  Tensor mask = Tensor::empty(x.shape(), DType::u8);
  const uint64_t base = gen.advance(uint64_t(n));
  // keep when the draw's top 53 bits as a unit double are >= p
  uint8_t* m = mask.data<uint8_t>();
  const uint64_t threshold = uint64_t(p * 9007199254740992.0);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) m[i] = (gen.at(base + uint64_t(i)) >> 11) >= threshold;
  });
  const float s = p >= 1.0 ? 0.f : float(1.0 / (1.0 - p));
  auto apply_mask = [mask, s](const Tensor& t) {
    Tensor f = kernels::f32_copy(t);
    float* q = f.data<float>();
    const uint8_t* mk = mask.data<uint8_t>();
    parallel_for(f.numel(), kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) q[i] = mk[i] ? q[i] * s : 0.f;
    });
    return f.to(t.dtype());
  };
  return autograd::record("dropout", {x}, apply_mask(x.detach()), [apply_mask](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{apply_mask(g[0])};
  });
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

namespace {
// y = f(x) elementwise, in f32 (a loop the compiler vectorizes), rounded once to x's dtype;
// backward dx = g df(x), the f32 input kept for it.
template <typename F, typename DF>
Tensor elementwise_f32(const char* name, const Tensor& x, F f, DF df) {
  kernels::check_floating(name, x);
  const DType dt = x.dtype();
  const Tensor xs = kernels::f32_contig(x.detach());
  Tensor y = Tensor::empty(x.shape());
  const float* xp = xs.data<float>();
  float* yp = y.data<float>();
  parallel_for(xs.numel(), 4096, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) yp[i] = f(xp[i]);
  });
  return autograd::record(name, {x}, y.to(dt), [xs, dt, df](const std::vector<Tensor>& g) {
    const Tensor go = kernels::f32_contig(g[0]);
    Tensor dx = Tensor::empty(xs.shape());
    const float *xp = xs.data<float>(), *gp = go.data<float>();
    float* dp = dx.data<float>();
    parallel_for(xs.numel(), 4096, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dp[i] = gp[i] * df(xp[i]);
    });
    return std::vector<Tensor>{dx.to(dt)};
  });
}
}  // namespace

// x * sigmoid(x)
Tensor silu(const Tensor& x) {
  ProfileScope prof_("silu");
  return elementwise_f32("silu", x, [](float v) { return v / (1.f + std::exp(-v)); }, [](float v) {
    const float s = 1.f / (1.f + std::exp(-v));  // silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
    return s * (1.f + v * (1.f - s));
  });
}

// d/dx x^(-1/2) = -x^(-3/2) / 2
Tensor rsqrt(const Tensor& x) {
  ProfileScope prof_("rsqrt");
  return elementwise_f32("rsqrt", x, [](float v) { return 1.f / std::sqrt(v); },
                         [](float v) { return -0.5f / (v * std::sqrt(v)); });
}

}  // namespace booster
