// conv2d. Patch embedding (stride = kernel, no padding) runs as a patch gather plus one
// oneDNN matmul, which is exact and several times faster than a direct convolution on
// plain layouts; every other case runs oneDNN's convolution primitives.
#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/reference.h"

namespace booster {
namespace kernels {
namespace {

using dnnl::memory;


dnnl::convolution_forward::primitive_desc conv_fwd_pd(const ref::ConvShape& s, bool bias) {
  memory::desc x({s.n, s.c, s.h, s.w}, memory::data_type::f32, memory::format_tag::nchw);
  memory::desc w({s.o, s.c, s.kh, s.kw}, memory::data_type::f32, memory::format_tag::oihw);
  memory::desc y({s.n, s.o, s.oh, s.ow}, memory::data_type::f32, memory::format_tag::nchw);
  memory::desc b({s.o}, memory::data_type::f32, memory::format_tag::a);
  const memory::dims st{s.sh, s.sw}, pad{s.ph, s.pw};
  auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                  x, w, b, y, st, pad, pad)
                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                  x, w, y, st, pad, pad);
  return dnnl::convolution_forward::primitive_desc(d, user_scratchpad_attr(), cpu_engine());
}

std::string conv_key(const char* op, const ref::ConvShape& s, bool bias) {
  KeyBuilder k(op);
  for (int64_t v : {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw}) k.add(v);
  k.add(int64_t(bias));
  return k.str();
}

memory m(const dnnl::primitive_desc_base& pd, dnnl_query_t q, int idx, const Tensor& t) {
  return memory(pd.query_md(dnnl::query(q), idx), cpu_engine(), t.raw_data());
}

void conv_fwd_fast(const ref::ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const auto& cp = cached_primitive(conv_key("conv_fwd", s, b.defined()), [&] {
    auto pd = conv_fwd_pd(s, b.defined());
    return std::make_pair(dnnl::primitive(dnnl::convolution_forward(pd)), dnnl::primitive_desc_base(pd));
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m(cp.pd, dnnl_query_src_md, 0, x)},
                                       {DNNL_ARG_WEIGHTS, m(cp.pd, dnnl_query_weights_md, 0, w)},
                                       {DNNL_ARG_DST, m(cp.pd, dnnl_query_dst_md, 0, y)}};
  if (b.defined()) args.emplace(DNNL_ARG_BIAS, m(cp.pd, dnnl_query_weights_md, 1, b));
  execute(cp, std::move(args));
}

void conv_bwd_data_fast(const ref::ConvShape& s, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const auto& cp = cached_primitive(conv_key("conv_bwd_data", s, false), [&] {
    auto hint = conv_fwd_pd(s, false);
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, hint.src_desc(), hint.weights_desc(),
                                            hint.dst_desc(), {s.sh, s.sw}, {s.ph, s.pw}, {s.ph, s.pw});
    dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
    return std::make_pair(dnnl::primitive(dnnl::convolution_backward_data(pd)), dnnl::primitive_desc_base(pd));
  });
  execute(cp, {{DNNL_ARG_DIFF_DST, m(cp.pd, dnnl_query_diff_dst_md, 0, dy)},
                     {DNNL_ARG_WEIGHTS, m(cp.pd, dnnl_query_weights_md, 0, w)},
                     {DNNL_ARG_DIFF_SRC, m(cp.pd, dnnl_query_diff_src_md, 0, dx)}});
}

void conv_bwd_weights_fast(const ref::ConvShape& s, const Tensor& x, const Tensor& dy, const Tensor& dw,
                           const Tensor& db) {
  const bool bias = db.defined();
  const auto& cp = cached_primitive(conv_key("conv_bwd_w", s, bias), [&] {
    auto hint = conv_fwd_pd(s, bias);
    const memory::dims st{s.sh, s.sw}, pad{s.ph, s.pw};
    auto d = bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, hint.src_desc(),
                                                             hint.weights_desc(), hint.bias_desc(), hint.dst_desc(),
                                                             st, pad, pad)
                  : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, hint.src_desc(),
                                                             hint.weights_desc(), hint.dst_desc(), st, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
    return std::make_pair(dnnl::primitive(dnnl::convolution_backward_weights(pd)), dnnl::primitive_desc_base(pd));
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m(cp.pd, dnnl_query_src_md, 0, x)},
                                       {DNNL_ARG_DIFF_DST, m(cp.pd, dnnl_query_diff_dst_md, 0, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, m(cp.pd, dnnl_query_diff_weights_md, 0, dw)}};
  if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, m(cp.pd, dnnl_query_diff_weights_md, 1, db));
  execute(cp, std::move(args));
}

// Patch embedding as matmul: x [B, C, nH*kh, nW*kw] -> patches [B*nH*nW, C*kh*kw] x w^T.
Tensor patch_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ref::ConvShape& s) {
  Tensor patches = x.view({s.n, s.c, s.oh, s.kh, s.ow, s.kw})
                       .permute({0, 2, 4, 1, 3, 5})
                       .reshape({s.n * s.oh * s.ow, s.c * s.kh * s.kw});
  Tensor y = linear(patches, w.reshape({s.o, s.c * s.kh * s.kw}), b);  // [B*nH*nW, O]
  return y.view({s.n, s.oh, s.ow, s.o}).permute({0, 3, 1, 2});
}

}  // namespace
}  // namespace kernels

// x: [B, C, H, W], w: [O, C, kh, kw], b: [O] -> [B, O, (H + 2p - kh) / s + 1, (W + 2p - kw) / s + 1]
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::pair<int64_t, int64_t> stride,
              std::pair<int64_t, int64_t> padding) {
  ProfileScope prof_("conv2d");
  kernels::check_floating("conv2d", x);
  kernels::check_same_dtype("conv2d", {&x, &w, &b});
  BOOSTER_CHECK_T(ShapeError, x.dim() == 4 && w.dim() == 4 && x.size(1) == w.size(1), "conv2d: input ",
                  shape_str(x.shape()), " and weight ", shape_str(w.shape()),
                  " do not fit (need [B, C, H, W] and [O, C, kh, kw])");
  BOOSTER_CHECK(stride.first > 0 && stride.second > 0 && padding.first >= 0 && padding.second >= 0,
                "conv2d: stride must be positive and padding non-negative");
  kernels::ref::ConvShape s{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
                            stride.first, stride.second, padding.first, padding.second, 0, 0};
  s.oh = (s.h + 2 * s.ph - s.kh) / s.sh + 1;
  s.ow = (s.w + 2 * s.pw - s.kw) / s.sw + 1;
  BOOSTER_CHECK_T(ShapeError, s.oh > 0 && s.ow > 0, "conv2d: kernel ", shape_str(w.shape()), " larger than padded input ",
                  shape_str(x.shape()));
  if (b.defined())
    BOOSTER_CHECK_T(ShapeError, b.shape() == Shape{s.o}, "conv2d: bias ", shape_str(b.shape()), " must be [", s.o, "]");
  const bool ref = kernels::use_reference();
  if (!ref && s.sh == s.kh && s.sw == s.kw && s.ph == 0 && s.pw == 0 && s.h % s.kh == 0 && s.w % s.kw == 0)
    return kernels::patch_conv(x, w, b, s);

  Tensor x32 = kernels::f32_contig(x), w32 = kernels::f32_contig(w);
  Tensor b32 = b.defined() ? kernels::f32_contig(b) : Tensor();
  Tensor y = Tensor::empty({s.n, s.o, s.oh, s.ow});
  if (ref)
    kernels::ref::conv2d_fwd(s, x32.data<float>(), w32.data<float>(), b.defined() ? b32.data<float>() : nullptr,
                             y.data<float>());
  else
    kernels::conv_fwd_fast(s, x32, w32, b32, y);
  const DType dt = x.dtype();
  const bool gx = x.requires_grad(), gw = w.requires_grad() || (b.defined() && b.requires_grad()), hb = b.defined();
  return autograd::record("conv2d", {x, w, b}, y.to(dt), [s, x32, w32, ref, dt, gx, gw, hb](const std::vector<Tensor>& g) {
    Tensor dy = kernels::f32_contig(g[0]);
    Tensor dx, dw, db;
    if (gx) {
      dx = Tensor::empty({s.n, s.c, s.h, s.w});
      if (ref) kernels::ref::conv2d_bwd_data(s, dy.data<float>(), w32.data<float>(), dx.data<float>());
      else kernels::conv_bwd_data_fast(s, dy, w32, dx);
      dx = dx.to(dt);
    }
    if (gw) {
      dw = Tensor::empty({s.o, s.c, s.kh, s.kw});
      db = hb ? Tensor::empty({s.o}) : Tensor();
      if (ref)
        kernels::ref::conv2d_bwd_weight(s, x32.data<float>(), dy.data<float>(), dw.data<float>(),
                                        hb ? db.data<float>() : nullptr);
      else
        kernels::conv_bwd_weights_fast(s, x32, dy, dw, db);
      dw = dw.to(dt);
      if (hb) db = db.to(dt);
    }
    return std::vector<Tensor>{dx, dw, db};
  });
}

}  // namespace booster
