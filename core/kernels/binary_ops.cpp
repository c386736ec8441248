// Elementwise add/sub/mul/div with NumPy broadcasting, scale and add_scalar. Same-shape
// f32 runs a vectorized loop; a right operand broadcast into the left runs on oneDNN's
// binary primitive; anything else is expanded first. Gradients sum back to each shape.
#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {
namespace kernels {
namespace {

enum class BinOp { add, sub, mul, div };

inline float apply(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::add: return a + b;
    case BinOp::sub: return a - b;
    case BinOp::mul: return a * b;
    case BinOp::div: return a / b;
  }
  return 0;
}

dnnl::algorithm dnnl_alg(BinOp op) {
  switch (op) {
    case BinOp::add: return dnnl::algorithm::binary_add;
    case BinOp::sub: return dnnl::algorithm::binary_sub;
    case BinOp::mul: return dnnl::algorithm::binary_mul;
    case BinOp::div: return dnnl::algorithm::binary_div;
  }
  return dnnl::algorithm::binary_add;
}

template <BinOp OP>
void same_shape_loop(const float* a, const float* b, float* c, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
#pragma omp simd
    for (int64_t i = s; i < e; ++i) c[i] = apply(OP, a[i], b[i]);
  });
}

// oneDNN binary with src1 broadcast into src0's shape (one dtype, contiguous); false when
// oneDNN has no kernel, or only its reference one (`native_only`).
bool dnnl_binary(BinOp op, const Tensor& a, const Tensor& b, const Tensor& c, bool native_only = false) {
  KeyBuilder key("binary");
  key.add(int64_t(op)).add(a).add(b).add(c);
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    dnnl::binary::desc d(dnnl_alg(op), md_of(a), md_of(b), md_of(c));
    dnnl::binary::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine());
    return std::make_pair(dnnl::primitive(dnnl::binary(pd)), dnnl::primitive_desc_base(pd));
  });
  if (!cp.prim || (native_only && !cp.native())) return false;
  execute(cp, {{DNNL_ARG_SRC_0, mem_of(cp.pd.src_desc(0), a)},
                     {DNNL_ARG_SRC_1, mem_of(cp.pd.src_desc(1), b)},
                     {DNNL_ARG_DST, mem_of(cp.pd.dst_desc(), c)}});
  return true;
}

// b's shape padded with leading ones to out_shape's rank (oneDNN wants equal ranks).
Tensor rank_padded(const Tensor& b, const Shape& out_shape) {
  Shape bs(out_shape.size() - size_t(b.dim()), 1);
  bs.insert(bs.end(), b.shape().begin(), b.shape().end());
  return b.view(bs);
}

Tensor binary_forward(BinOp op, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  if (!use_reference() && a.dtype() != DType::f32 && a.shape() == out_shape) {
    // bf16/f16 where they lie: oneDNN computes in f32 and rounds once, as the staged path
    // does (a residual add of [1576, 768] bf16 took 0.6 ms through f32 copies).
    Tensor out = Tensor::empty(out_shape, a.dtype());
    if (dnnl_binary(op, contig_as(a, a.dtype()), rank_padded(contig_as(b, b.dtype()), out_shape), out, true)) return out;
  }
  Tensor out = Tensor::empty(out_shape, DType::f32);
  const int64_t n = out.numel();
  if (use_reference()) {
    Tensor ae = f32_contig(a.expand(out_shape)), be = f32_contig(b.expand(out_shape));
    const float *pa = ae.data<float>(), *pb = be.data<float>();
    float* pc = out.data<float>();
    for (int64_t i = 0; i < n; ++i) pc[i] = float(apply(op, pa[i], pb[i]));
    return out.to(a.dtype());
  }
  Tensor af = f32_contig(a), bf = f32_contig(b);
  if (a.shape() != out_shape) {
    af = f32_contig(af.expand(out_shape));
  }
  if (bf.shape() != out_shape) {
    bf = rank_padded(bf, out_shape);
    if (dnnl_binary(op, af, bf, out)) return out.to(a.dtype());
    bf = f32_contig(bf.expand(out_shape));
  }
  const float *pa = af.data<float>(), *pb = bf.data<float>();
  float* pc = out.data<float>();
  switch (op) {
    case BinOp::add: same_shape_loop<BinOp::add>(pa, pb, pc, n); break;
    case BinOp::sub: same_shape_loop<BinOp::sub>(pa, pb, pc, n); break;
    case BinOp::mul: same_shape_loop<BinOp::mul>(pa, pb, pc, n); break;
    case BinOp::div: same_shape_loop<BinOp::div>(pa, pb, pc, n); break;
  }
  return out.to(a.dtype());
}

Tensor binary(BinOp op, const char* name, const Tensor& a, const Tensor& b) {
  ProfileScope prof_("binary");
  check_same_dtype(name, {&a, &b});
  check_floating(name, a);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor ad = a.detach(), bd = b.detach();
  Tensor out = binary_forward(op, ad, bd, out_shape);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record(name, {a, b}, out, [op, ad, bd, ga, gb](const std::vector<Tensor>& gv) {
    const Tensor& g = gv[0];
    Tensor da, db;
    switch (op) {
      case BinOp::add:
        da = ga ? sum_to(g, ad.shape()) : Tensor();
        db = gb ? sum_to(g, bd.shape()) : Tensor();
        break;
      case BinOp::sub:
        da = ga ? sum_to(g, ad.shape()) : Tensor();
        db = gb ? sum_to(scale(g, -1.0), bd.shape()) : Tensor();
        break;
      case BinOp::mul:  // d(a*b) = g*b, g*a
        da = ga ? sum_to(mul(g, bd), ad.shape()) : Tensor();
        db = gb ? sum_to(mul(g, ad), bd.shape()) : Tensor();
        break;
      case BinOp::div:  // d(a/b) = g/b, -g*a/b^2
        da = ga ? sum_to(div(g, bd), ad.shape()) : Tensor();
        db = gb ? sum_to(scale(div(mul(g, ad), mul(bd, bd)), -1.0), bd.shape()) : Tensor();
        break;
    }
    return std::vector<Tensor>{da, db};
  });
}

// dst = dst op src in place for bf16/f16 tensors of one dtype and shape, both contiguous, on
// oneDNN's native binary (f32 inside, rounded once into dst, as the staged path rounds: the
// same bits); false where it has none.
bool low_precision_in_place(BinOp op, Tensor& dst, const Tensor& src) {
  if (use_reference() || dst.dtype() == DType::f32 || src.dtype() != dst.dtype() || dst.shape() != src.shape() ||
      !dst.is_contiguous() || !src.is_contiguous())
    return false;
  return dnnl_binary(op, dst, src, dst, true);
}

}  // namespace

bool add_low_precision_(Tensor& dst, const Tensor& src) { return low_precision_in_place(BinOp::add, dst, src); }

void mul_(Tensor& dst, const Tensor& src) {
  BOOSTER_CHECK_T(ShapeError, dst.shape() == src.shape(), "mul_: shape mismatch ", shape_str(dst.shape()), " vs ",
                  shape_str(src.shape()));
  BOOSTER_CHECK(dst.is_contiguous(), "mul_: destination must be contiguous");
  check_same_dtype("mul_", {&dst, &src});
  if (dst.dtype() == DType::f32 && src.is_contiguous() && !use_reference()) {  // mul's own loop, in place
    same_shape_loop<BinOp::mul>(dst.data<float>(), src.data<float>(), dst.data<float>(), dst.numel());
    return;
  }
  if (low_precision_in_place(BinOp::mul, dst, src)) return;
  dst.copy_(binary_forward(BinOp::mul, dst, src, dst.shape()));
}

}  // namespace kernels

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    BOOSTER_CHECK_T(ShapeError, da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                    " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  BOOSTER_CHECK_T(ShapeError, lead >= 0, "sum_to: cannot reduce ", shape_str(x.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && x.size(d) != 1)) dims.push_back(d);
  return sum(x, dims, true).reshape(shape);
}

Tensor add(const Tensor& a, const Tensor& b) { return kernels::binary(kernels::BinOp::add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return kernels::binary(kernels::BinOp::sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return kernels::binary(kernels::BinOp::mul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return kernels::binary(kernels::BinOp::div, "div", a, b); }

// y = x * s
Tensor scale(const Tensor& x, double s) {
  ProfileScope prof_("scale");
  kernels::check_floating("scale", x);
  Tensor y = kernels::f32_copy(x);
  kernels::scale_(y, s);
  return autograd::record("scale", {x}, y.to(x.dtype()), [s](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{scale(g[0], s)};
  });
}

// y = x + s
Tensor add_scalar(const Tensor& x, double s) {
  ProfileScope prof_("add_scalar");
  kernels::check_floating("add_scalar", x);
  Tensor y = kernels::f32_copy(x);
  float* p = y.data<float>();
  const float f = float(s);
  parallel_for(y.numel(), kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) p[i] += f;
  });
  return autograd::record("add_scalar", {x}, y.to(x.dtype()), [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0]};
  });
}

}  // namespace booster
