// RMSNorm (LLaMA's LlamaRMSNorm): y = x / sqrt(mean(x^2) + eps) * w over the last dim, as
// transformers computes it (in f32, the result rounded once to x's dtype). Row loops the
// compiler vectorizes; the backward keeps each row's 1 / rms from the forward.
#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/parallel.h"
#include "core/common/profiler.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"

namespace booster {

namespace {
// The plain ops an RMS norm amounts to, in f32 as transformers' LlamaRMSNorm writes them
// (kernels::FusedKernels::normalization off).
Tensor rms_norm_plain(const Tensor& x, const Tensor& w, double eps) {
  const Tensor x32 = x.to(DType::f32);
  return (x32 * rsqrt(add_scalar(mean(x32 * x32, {-1}, true), eps)) * w.to(DType::f32)).to(x.dtype());
}
}  // namespace

// x: [..., C], w: [C] -> [..., C]
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  ProfileScope prof_("rms_norm");
  kernels::check_floating("rms_norm", x);
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1), "rms_norm: weight ",
                  shape_str(w.shape()), " does not fit input ", shape_str(x.shape()), " (need [", x.size(-1), "])");
  BOOSTER_CHECK(eps > 0, "rms_norm: eps must be positive, got ", eps);
  if (!kernels::fused_kernels().normalization && !kernels::use_reference()) return rms_norm_plain(x, w, eps);
  const DType dt = x.dtype();
  const Tensor xs = kernels::f32_contig(x.detach()), ws = kernels::f32_contig(w.detach());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor y = Tensor::empty(x.shape()), inv = Tensor::empty({rows});
  const float *xp = xs.data<float>(), *wp = ws.data<float>();
  float *yp = y.data<float>(), *ip = inv.data<float>();
  parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = xp + r * c;
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < c; ++j) ss += xr[j] * xr[j];
      const float s = 1.f / std::sqrt(ss / float(c) + float(eps));
      ip[r] = s;
      float* yr = yp + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * s * wp[j];
    }
  });
  return autograd::record("rms_norm", {x, w}, y.to(dt), [xs, ws, inv, c, rows, dt, wdt = w.dtype()](const std::vector<Tensor>& g) {
    // With n = x s: dx = s (w g - n mean(n w g)), dw = sum over rows of g n.
    const Tensor go = kernels::f32_contig(g[0]);
    Tensor dx = Tensor::empty(xs.shape()), dw = Tensor::zeros({c});
    const float *xp = xs.data<float>(), *wp = ws.data<float>(), *gp = go.data<float>(), *ip = inv.data<float>();
    float *dxp = dx.data<float>(), *dwp = dw.data<float>();
    parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float *xr = xp + r * c, *gr = gp + r * c, s = ip[r];
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < c; ++j) dot += xr[j] * s * wp[j] * gr[j];
        const float m = dot / float(c);
        float* dr = dxp + r * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) dr[j] = s * (wp[j] * gr[j] - xr[j] * s * m);
      }
    });
    // dw: rows summed in order (one pass a column block, every thread its own columns).
    parallel_for(c, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = 0; r < rows; ++r) {
        const float *xr = xp + r * c, *gr = gp + r * c, s = ip[r];
        for (int64_t j = b; j < e; ++j) dwp[j] += gr[j] * xr[j] * s;
      }
    });
    return std::vector<Tensor>{dx.to(dt), dw.to(wdt)};
  });
}

}  // namespace booster
