// layer_norm (own AVX-512 rows for f32 and bf16, see layer_norm_avx512.h) and softmax on
// oneDNN (f32 compute, statistics in f32), reference loops as
// the oracle. Inputs are viewed as [rows, C] with C the last dim.
#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/layer_norm_avx512.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/kernels/reference.h"
#include "core/tensor/strided.h"

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
  return dnnl::layer_normalization_forward::primitive_desc(d, user_scratchpad_attr(), cpu_engine());
}

const CachedPrimitive& ln_fwd_prim(const Tensor& x2, double eps, bool affine) {
  KeyBuilder key("ln_fwd");
  key.add(x2).add(eps).add(int64_t(affine));
  return cached_primitive(key.str(), [&] {
    auto pd = ln_fwd_pd(md_of(x2), eps, affine);
    return std::make_pair(dnnl::primitive(dnnl::layer_normalization_forward(pd)), dnnl::primitive_desc_base(pd));
  });
}

// Fast forward: y, mean, variance for x2 [rows, C] (contiguous f32, or bf16 where oneDNN
// has the kernel; statistics, weight and bias in f32).
void ln_forward(const Tensor& x2, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean, Tensor& var) {
  const bool affine = w.defined();
  const CachedPrimitive& cp = ln_fwd_prim(x2, eps, affine);
  BOOSTER_CHECK_T(BackendError, cp.prim.has_value(), "layer_norm: oneDNN has no kernel for ", shape_str(x2.shape()));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mem_of(md_of(x2), x2)},
                                             {DNNL_ARG_DST, mem_of(md_of(y), y)},
                                             {DNNL_ARG_MEAN, mem_of(md_of(mean), mean)},
                                             {DNNL_ARG_VARIANCE, mem_of(md_of(var), var)}};
  if (affine) {
    args.emplace(DNNL_ARG_SCALE, mem_of(md_of(w), w));
    args.emplace(DNNL_ARG_SHIFT, mem_of(md_of(b), b));
  }
  execute(cp, std::move(args));
}

// dx (x2's dtype), dw, db (f32); false when oneDNN has no kernel for x2's dtype.
bool ln_backward(const Tensor& x2, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& var, const Tensor& dy, double eps,
                 Tensor& dx, Tensor& dw, Tensor& db) {
  const bool affine = w.defined();
  KeyBuilder key("ln_bwd");
  key.add(x2).add(eps).add(int64_t(affine));
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    auto hint = ln_fwd_pd(md_of(x2), eps, affine);
    dnnl::layer_normalization_backward::desc d(prop_kind::backward, md_of(x2), md_of(x2), float(eps), ln_flags(affine));
    dnnl::layer_normalization_backward::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
    return std::make_pair(dnnl::primitive(dnnl::layer_normalization_backward(pd)), dnnl::primitive_desc_base(pd));
  });
  if (!cp.native()) return false;
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
  execute(cp, std::move(args));
  return true;
}

// Softmax over the rows of x2 [rows, C].
const CachedPrimitive& softmax_prim(const Tensor& x2) {
  KeyBuilder key("softmax_fwd");
  key.add(x2);
  return cached_primitive(key.str(), [&] {
    dnnl::softmax_forward::primitive_desc pd(dnnl::softmax_forward::desc(prop_kind::forward_training, md_of(x2), 1),
                                             user_scratchpad_attr(), cpu_engine());
    return std::make_pair(dnnl::primitive(dnnl::softmax_forward(pd)), dnnl::primitive_desc_base(pd));
  });
}

// Whether softmax computes x2 [rows, C] in its own dtype: where oneDNN has a kernel for it
// (bf16: it sums in f32 inside); else, and on the reference loops, in f32.
bool softmax_in_own_dtype(const Tensor& x2) {
  return x2.dtype() == DType::f32 || (!use_reference() && softmax_prim(x2).native());
}

// y = softmax(x2) over the rows of [rows, C] contiguous tensors of one dtype that
// softmax_in_own_dtype accepts; y may be x2 (oneDNN's softmax runs in place).
void softmax_rows(const Tensor& x2, const Tensor& y) {
  if (use_reference())
    ref::softmax_fwd(x2.data<float>(), y.data<float>(), x2.size(0), x2.size(1));
  else
    execute(softmax_prim(x2), {{DNNL_ARG_SRC, mem_of(md_of(x2), x2)}, {DNNL_ARG_DST, mem_of(md_of(y), y)}});
}

float to_float(float v) { return v; }
float to_float(bf16_t v) { return from_bf16(v); }
float to_float(f16_t v) { return from_f16(v); }
template <typename T> T from_float(float v);
template <> float from_float<float>(float v) { return v; }
template <> bf16_t from_float<bf16_t>(float v) { return to_bf16(v); }
template <> f16_t from_float<f16_t>(float v) { return to_f16(v); }

// dx = y * (dy - sum(y * dy)) per row, in f32 on T storage. oneDNN's softmax backward is
// a scalar reference kernel on CPUs without AVX-512, so this loop is the fast path.
template <typename T>
void softmax_bwd_rows(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t rows = y.size(0), c = y.size(1);
  const T *py = static_cast<const T*>(y.raw_data()), *pg = static_cast<const T*>(dy.raw_data());
  T* px = static_cast<T*>(dx.raw_data());
  parallel_for(rows, kGrain / std::max<int64_t>(c, 1), [&](int64_t b, int64_t e) {
    std::vector<float> yr(static_cast<size_t>(c)), gr(static_cast<size_t>(c));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t i = 0; i < c; ++i) yr[size_t(i)] = to_float(py[r * c + i]), gr[size_t(i)] = to_float(pg[r * c + i]);
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < c; ++i) dot += yr[size_t(i)] * gr[size_t(i)];
      for (int64_t i = 0; i < c; ++i) px[r * c + i] = from_float<T>(yr[size_t(i)] * (gr[size_t(i)] - dot));
    }
  });
}

}  // namespace
}  // namespace kernels

namespace {
// The plain ops a layer norm amounts to, in f32 (kernels::FusedKernels::normalization off).
Tensor layer_norm_plain(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const Tensor x32 = x.to(DType::f32), xc = x32 - mean(x32, {-1}, true);
  Tensor y = xc * rsqrt(add_scalar(mean(xc * xc, {-1}, true), eps));
  if (w.defined()) y = y * w.to(DType::f32) + b.to(DType::f32);
  return y.to(x.dtype());
}
}  // namespace

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
  if (!ref && !kernels::fused_kernels().normalization) return layer_norm_plain(x, w, b, eps);
  // f32 and bf16 on the own AVX-512 rows (layer_norm_avx512.h); else oneDNN, in x's own dtype
  // where it has a kernel (bf16: statistics still in f32 inside), else staged through f32.
  const bool own = !ref && (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && kernels::avx512::cpu_ok();
  Tensor x2 = kernels::contig_as(x, ref ? DType::f32 : x.dtype()).view({rows, c});
  if (!ref && !own && x2.dtype() != DType::f32 && !kernels::ln_fwd_prim(x2, eps, affine).native())
    x2 = kernels::f32_contig(x).view({rows, c});
  Tensor w32 = affine ? kernels::f32_contig(w) : Tensor(), b32 = affine ? kernels::f32_contig(b) : Tensor();
  Tensor y = Tensor::empty({rows, c}, x2.dtype()), mean = Tensor::empty({rows}), stat = Tensor::empty({rows});
  const float* wp = affine ? w32.data<float>() : nullptr;
  const float* bp = affine ? b32.data<float>() : nullptr;
  if (ref)  // stat = 1 / sqrt(var + eps)
    kernels::ref::layer_norm_fwd(x2.data<float>(), wp, bp, y.data<float>(), mean.data<float>(), stat.data<float>(), rows,
                                 c, eps);
  else if (own)  // stat = 1 / sqrt(var + eps)
    kernels::layer_norm_fwd_avx512(x2, wp, bp, y, mean.data<float>(), stat.data<float>(), float(eps));
  else  // stat = var
    kernels::ln_forward(x2, w32, b32, eps, y, mean, stat);
  const DType dt = x.dtype();
  const Shape shape = x.shape();
  const bool gw = affine && (w.requires_grad() || b.requires_grad());
  return autograd::record(
      "layer_norm", {x, w, b}, y.view(shape).to(dt),
      [x2, w32, b32, mean, stat, eps, ref, own, affine, gw, dt, shape, rows, c](const std::vector<Tensor>& g) {
        Tensor dy = kernels::contig_as(g[0], x2.dtype()).view({rows, c});
        Tensor dx = Tensor::empty({rows, c}, x2.dtype());
        Tensor dw = affine ? Tensor::empty({c}) : Tensor(), db = affine ? Tensor::empty({c}) : Tensor();
        const float* wp = affine ? w32.data<float>() : nullptr;
        float* dwp = gw ? dw.data<float>() : nullptr;
        float* dbp = gw ? db.data<float>() : nullptr;
        if (own) {
          kernels::layer_norm_bwd_avx512(x2, wp, mean.data<float>(), stat.data<float>(), dy, dx, dwp, dbp);
        } else if (ref) {
          kernels::ref::layer_norm_bwd(x2.data<float>(), wp, mean.data<float>(), stat.data<float>(), dy.data<float>(),
                                       dx.data<float>(), affine ? dw.data<float>() : nullptr,
                                       affine ? db.data<float>() : nullptr, rows, c);
        } else if (!kernels::ln_backward(x2, w32, b32, mean, stat, dy, eps, dx, dw, db)) {  // no low-precision kernel
          dx = Tensor::empty({rows, c});
          BOOSTER_CHECK_T(BackendError,
                          kernels::ln_backward(kernels::f32_contig(x2), w32, b32, mean, stat, kernels::f32_contig(dy), eps,
                                               dx, dw, db),
                          "layer_norm backward: oneDNN has no f32 kernel");
        }
        return std::vector<Tensor>{dx.view(shape).to(dt), gw ? dw.to(dt) : Tensor(), gw ? db.to(dt) : Tensor()};
      });
}

// x: [*, C] -> [*, C], softmax over C
Tensor softmax(const Tensor& x) {
  ProfileScope prof_("softmax");
  kernels::check_floating("softmax", x);
  const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  Tensor x2 = kernels::contig_as(x, x.dtype()).view({rows, c});
  if (!kernels::softmax_in_own_dtype(x2)) x2 = kernels::f32_contig(x).view({rows, c});
  Tensor y = Tensor::empty({rows, c}, x2.dtype());
  kernels::softmax_rows(x2, y);
  const DType dt = x.dtype();
  const Shape shape = x.shape();
  return autograd::record("softmax", {x}, y.view(shape).to(dt), [y, dt, shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{kernels::softmax_backward(y, g[0]).view(shape).to(dt)};
  });
}

namespace kernels {

Tensor softmax_backward(const Tensor& y, const Tensor& dy) {
  const int64_t c = y.size(-1), rows = y.numel() / std::max<int64_t>(c, 1);
  Tensor dx = Tensor::empty({rows, c}, y.dtype());
  softmax_backward_into(y, contig_as(dy, y.dtype()), dx);
  return dx;
}

void softmax_backward_into(const Tensor& y_in, const Tensor& dy_in, const Tensor& dx_in) {
  const int64_t c = y_in.size(-1), rows = y_in.numel() / std::max<int64_t>(c, 1);
  for (const Tensor* t : {&dy_in, &dx_in})
    BOOSTER_CHECK(y_in.is_contiguous() && t->is_contiguous() && t->dtype() == y_in.dtype() && t->numel() == y_in.numel(),
                  "softmax_backward_into: y ", shape_str(y_in.shape()), ", dy ", shape_str(dy_in.shape()), " and dx ",
                  shape_str(dx_in.shape()), " must be contiguous, of one dtype and size");
  Tensor y = y_in.view({rows, c}), dy = dy_in.view({rows, c}), dx = dx_in.view({rows, c});
  if (use_reference()) {
    Tensor y32 = f32_contig(y), dy32 = f32_contig(dy), dx32 = Tensor::empty({rows, c});
    ref::softmax_bwd(y32.data<float>(), dy32.data<float>(), dx32.data<float>(), rows, c);
    strided_copy(dx, dx32.to(y.dtype()));
    return;
  }
  // Each row is read whole before it is written: dx may be dy.
  if (y.dtype() == DType::f32) softmax_bwd_rows<float>(y, dy, dx);
  else if (y.dtype() == DType::bf16) softmax_bwd_rows<bf16_t>(y, dy, dx);
  else softmax_bwd_rows<f16_t>(y, dy, dx);
}

void softmax_(const Tensor& x_in) {
  BOOSTER_CHECK(x_in.is_contiguous(), "softmax_: x must be contiguous");
  const int64_t c = x_in.size(-1), rows = x_in.numel() / std::max<int64_t>(c, 1);
  Tensor x = x_in.view({rows, c});
  if (softmax_in_own_dtype(x)) {
    softmax_rows(x, x);
    return;
  }
  Tensor x32 = f32_copy(x);
  softmax_rows(x32, x32);
  strided_copy(x, x32.to(x.dtype()));
}

}  // namespace kernels

}  // namespace booster
