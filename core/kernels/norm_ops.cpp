// layer_norm and softmax on oneDNN (f32 compute, statistics in f32), reference loops as
// the oracle. Inputs are viewed as [rows, C] with C the last dim.
#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/reference.h"

namespace booster {
namespace kernels {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;

normalization_flags ln_flags(bool affine) {
  return affine ? (normalization_flags::use_scale | normalization_flags::use_shift) : normalization_flags::none;
}

dnnl::layer_normalization_forward::primitive_desc ln_fwd_pd(const dnnl::memory::desc& md, double eps, bool affine) {
  dnnl::layer_normalization_forward::desc d(prop_kind::forward_training, md, float(eps), ln_flags(affine));
  return dnnl::layer_normalization_forward::primitive_desc(d, cpu_engine());
}

// Fast forward: y, mean, variance for x2 [rows, C] (contiguous f32).
void ln_forward(const Tensor& x2, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean, Tensor& var) {
  const bool affine = w.defined();
  KeyBuilder key("ln_fwd");
  key.add(x2).add(eps).add(int64_t(affine));
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    auto pd = ln_fwd_pd(md_of(x2), eps, affine);
    return std::make_pair(dnnl::primitive(dnnl::layer_normalization_forward(pd)), dnnl::primitive_desc_base(pd));
  });
  BOOSTER_CHECK_T(BackendError, cp.prim.has_value(), "layer_norm: oneDNN has no kernel for ", shape_str(x2.shape()));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem_of(md_of(x2), x2)},
                                             {DNNL_ARG_DST, mem_of(md_of(y), y)},
                                             {DNNL_ARG_MEAN, mem_of(md_of(mean), mean)},
                                             {DNNL_ARG_VARIANCE, mem_of(md_of(var), var)}};
  if (affine) {
    args.emplace(DNNL_ARG_SCALE, mem_of(md_of(w), w));
    args.emplace(DNNL_ARG_SHIFT, mem_of(md_of(b), b));
  }
  execute(*cp.prim, args);
}

void ln_backward(const Tensor& x2, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& var, const Tensor& dy, double eps,
                 Tensor& dx, Tensor& dw, Tensor& db) {
  const bool affine = w.defined();
  KeyBuilder key("ln_bwd");
  key.add(x2).add(eps).add(int64_t(affine));
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    auto hint = ln_fwd_pd(md_of(x2), eps, affine);
    dnnl::layer_normalization_backward::desc d(prop_kind::backward, md_of(x2), md_of(x2), float(eps), ln_flags(affine));
    dnnl::layer_normalization_backward::primitive_desc pd(d, cpu_engine(), hint);
    return std::make_pair(dnnl::primitive(dnnl::layer_normalization_backward(pd)), dnnl::primitive_desc_base(pd));
  });
  BOOSTER_CHECK_T(BackendError, cp.prim.has_value(), "layer_norm backward: oneDNN has no kernel");
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem_of(md_of(x2), x2)},
                                             {DNNL_ARG_DIFF_DST, mem_of(md_of(dy), dy)},
                                             {DNNL_ARG_MEAN, mem_of(md_of(mean), mean)},
                                             {DNNL_ARG_VARIANCE, mem_of(md_of(var), var)},
                                             {DNNL_ARG_DIFF_SRC, mem_of(md_of(dx), dx)}};
  if (affine) {
    args.emplace(DNNL_ARG_SCALE, mem_of(md_of(w), w));
    args.emplace(DNNL_ARG_SHIFT, mem_of(md_of(b), b));  // oneDNN 2.x wants it, though unused
    args.emplace(DNNL_ARG_DIFF_SCALE, mem_of(md_of(dw), dw));
    args.emplace(DNNL_ARG_DIFF_SHIFT, mem_of(md_of(db), db));
  }
  execute(*cp.prim, args);
}

// Fast softmax over rows of x2 [rows, C].
dnnl::softmax_forward::primitive_desc sm_fwd_pd(const dnnl::memory::desc& md) {
  dnnl::softmax_forward::desc d(prop_kind::forward_training, md, 1);
  return dnnl::softmax_forward::primitive_desc(d, cpu_engine());
}

}  // namespace
}  // namespace kernels

// x: [*, C], w, b: [C] -> [*, C]
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  ProfileScope prof_("layer_norm");
  kernels::check_floating("layer_norm", x);
  kernels::check_same_dtype("layer_norm", {&x, &w, &b});
  const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  BOOSTER_CHECK_T(ShapeError, w.defined() == b.defined(), "layer_norm: give both weight and bias, or neither");
  if (w.defined())
    BOOSTER_CHECK_T(ShapeError, w.shape() == Shape{c} && b.shape() == Shape{c}, "layer_norm: weight ",
                    shape_str(w.shape()), " and bias ", shape_str(b.shape()), " must be [", c, "] for input ",
                    shape_str(x.shape()));
  const bool ref = kernels::use_reference(), affine = w.defined();
  Tensor x2 = kernels::f32_contig(x).view({rows, c});
  Tensor w32 = affine ? kernels::f32_contig(w) : Tensor(), b32 = affine ? kernels::f32_contig(b) : Tensor();
  Tensor y = Tensor::empty({rows, c}), mean = Tensor::empty({rows}), stat = Tensor::empty({rows});
  if (ref)  // stat = 1 / sqrt(var + eps)
    kernels::ref::layer_norm_fwd(x2.data<float>(), affine ? w32.data<float>() : nullptr,
                                 affine ? b32.data<float>() : nullptr, y.data<float>(), mean.data<float>(),
                                 stat.data<float>(), rows, c, eps);
  else  // stat = var
    kernels::ln_forward(x2, w32, b32, eps, y, mean, stat);
  const DType dt = x.dtype();
  const Shape shape = x.shape();
  const bool gw = affine && (w.requires_grad() || b.requires_grad());
  return autograd::record(
      "layer_norm", {x, w, b}, y.view(shape).to(dt),
      [x2, w32, b32, mean, stat, eps, ref, affine, gw, dt, shape, rows, c](const std::vector<Tensor>& g) {
        Tensor dy = kernels::f32_contig(g[0]).view({rows, c});
        Tensor dx = Tensor::empty({rows, c});
        Tensor dw = affine ? Tensor::empty({c}) : Tensor(), db = affine ? Tensor::empty({c}) : Tensor();
        if (ref)
          kernels::ref::layer_norm_bwd(x2.data<float>(), affine ? w32.data<float>() : nullptr, mean.data<float>(),
                                       stat.data<float>(), dy.data<float>(), dx.data<float>(),
                                       affine ? dw.data<float>() : nullptr, affine ? db.data<float>() : nullptr, rows, c);
        else
          kernels::ln_backward(x2, w32, b32, mean, stat, dy, eps, dx, dw, db);
        return std::vector<Tensor>{dx.view(shape).to(dt), gw ? dw.to(dt) : Tensor(), gw ? db.to(dt) : Tensor()};
      });
}

// x: [*, C] -> [*, C], softmax over C
Tensor softmax(const Tensor& x) {
  ProfileScope prof_("softmax");
  kernels::check_floating("softmax", x);
  const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  const bool ref = kernels::use_reference();
  Tensor x2 = kernels::f32_contig(x).view({rows, c});
  Tensor y = Tensor::empty({rows, c});
  if (ref) {
    kernels::ref::softmax_fwd(x2.data<float>(), y.data<float>(), rows, c);
  } else {
    kernels::KeyBuilder key("softmax_fwd");
    key.add(x2);
    const auto& cp = kernels::cached_primitive(key.str(), [&] {
      auto pd = kernels::sm_fwd_pd(kernels::md_of(x2));
      return std::make_pair(dnnl::primitive(dnnl::softmax_forward(pd)), dnnl::primitive_desc_base(pd));
    });
    kernels::execute(*cp.prim, {{DNNL_ARG_SRC, kernels::mem_of(kernels::md_of(x2), x2)},
                                {DNNL_ARG_DST, kernels::mem_of(kernels::md_of(y), y)}});
  }
  const DType dt = x.dtype();
  const Shape shape = x.shape();
  return autograd::record("softmax", {x}, y.view(shape).to(dt), [y, ref, dt, shape, rows, c](const std::vector<Tensor>& g) {
    Tensor dy = kernels::f32_contig(g[0]).view({rows, c});
    Tensor dx = Tensor::empty({rows, c});
    if (ref) {
      kernels::ref::softmax_bwd(y.data<float>(), dy.data<float>(), dx.data<float>(), rows, c);
    } else {
      // dx = y * (dy - sum(y * dy)) per row; oneDNN's softmax backward is a scalar
      // reference kernel on CPUs without AVX-512, so this loop is the fast path.
      const float *py = y.data<float>(), *pg = dy.data<float>();
      float* px = dx.data<float>();
      kernels::parallel_for(rows, kernels::kGrain / std::max<int64_t>(c, 1), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const float *yr = py + r * c, *gr = pg + r * c;
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t i = 0; i < c; ++i) dot += yr[i] * gr[i];
          float* xr = px + r * c;
#pragma omp simd
          for (int64_t i = 0; i < c; ++i) xr[i] = yr[i] * (gr[i] - dot);
        }
      });
    }
    return std::vector<Tensor>{dx.view(shape).to(dt)};
  });
}

}  // namespace booster
