// matmul and linear: oneDNN matmul on strided views (transposes cost no copy), with the
// gradients as two more matmuls. bf16/f16 run natively where oneDNN has kernels for the
// CPU (AMX, AVX512-BF16/FP16) and in f32 on low-precision storage elsewhere.
#include <algorithm>

#include "core/autograd/engine.h"
#include "core/autograd/weight_grad_store.h"
#include "core/common/profiler.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/kernels/reference.h"
#include "core/tensor/strided.h"

namespace booster {
namespace kernels {
namespace {

// True when t is a batch of row- or column-major matrices (any leading dimension, any
// positive batch strides): oneDNN's gemm reads such views without a copy, so attention's
// permuted heads and transposed keys cost nothing.
bool matrix_layout_ok(const Tensor& t) {
  const int64_t nd = t.dim();
  const auto& sh = t.shape();
  const auto& st = t.strides();
  const bool row = st[nd - 1] == 1 && st[nd - 2] >= sh[nd - 1];
  const bool col = st[nd - 2] == 1 && st[nd - 1] >= sh[nd - 2];
  if (!row && !col) return false;
  for (int64_t d = 0; d < nd - 2; ++d)
    if (sh[d] != 1 && st[d] <= 0) return false;
  return true;
}

// Weights at least this large are packed into the blocked layout oneDNN's kernel reads
// fastest, by a reorder before the matmul (a plain-layout kernel packs them inside,
// slower). Measured at ViT-B MLP shapes, 2 threads: dx = dy W +10-40 % in f32 and bf16,
// the reorder of a 768x3072 weight ~0.6 ms. Activations (the x of dW = dy^T x) are not
// packed: the reorder of a [1576, 768] activation costs what it saves (core_bench and
// vit_benchmark, alternated runs).
constexpr int64_t kPackMinElements = 1 << 16;

// c = alpha a x b (+ bias) on oneDNN (c: any strides with a unit last one); false when
// oneDNN has only its slow reference kernel or none at all for this case.
bool dnnl_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c, RightOperand right,
                 double alpha) {
  const bool pack = right == RightOperand::weight && b.dim() == 2 && b.numel() >= kPackMinElements;
  KeyBuilder key("matmul");
  key.add(a).add(b).add(c).add(int64_t(pack)).add(alpha);
  if (bias.defined()) key.add(bias);
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    const auto bmd = pack ? dnnl::memory::desc({b.size(0), b.size(1)}, dnnl_type(b.dtype()), dnnl::memory::format_tag::any)
                          : md_of(b);
    auto d = bias.defined() ? dnnl::matmul::desc(md_of(a), bmd, md_of(bias), md_of(c))
                            : dnnl::matmul::desc(md_of(a), bmd, md_of(c));
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (alpha != 1.0) attr.set_output_scales(0, {float(alpha)});
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    return std::make_pair(dnnl::primitive(dnnl::matmul(pd)), dnnl::primitive_desc_base(pd));
  });
  if (!cp.native()) return false;
  const dnnl::memory::desc wmd = cp.pd.weights_desc();
  Tensor packed;
  if (pack && wmd != md_of(b)) {
    packed = Tensor::empty({int64_t(wmd.get_size())}, DType::u8);
    reorder_into(b, wmd, key.str(), packed.raw_data());
  }
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, mem_of(cp.pd.src_desc(), a)},
      {DNNL_ARG_WEIGHTS, packed.defined() ? dnnl::memory(wmd, cpu_engine(), packed.raw_data()) : mem_of(wmd, b)},
      {DNNL_ARG_DST, mem_of(cp.pd.dst_desc(), c)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, mem_of(cp.pd.weights_desc(1), bias));
  execute(cp, std::move(args));
  return true;
}

// A column-major low-precision left operand (dW = dy^T x) made row-major first where
// oneDNN's kernel is AMX: it reads a transposed source slowly (dW at ViT-B MLP shapes:
// 490-810 GFLOP/s transposed, 710-860 after a tiled transposing copy of 1-3 ms). AVX-512
// kernels (f32, and bf16 without AMX) read it as fast as the copy would cost: there the
// copy lost 7 % of bf16 linear fwd+bwd (core_bench, Zen-class AVX512-BF16, alternated).
Tensor row_major_left(const Tensor& a) {
  const bool amx = avx512::cpu_amx_ok();
  if (!amx || a.dtype() == DType::f32 || a.dim() != 2 || a.strides()[0] != 1 || a.numel() < kPackMinElements) return a;
  return a.detach().contiguous();
}

// c = a x b (+ bias) on the reference loops; b's batch dims are all 1 or equal to a's.
Tensor ref_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const int64_t batch = shape_numel(out_shape) / (m * n);
  const bool w_batched = b.numel() != k * n;
  Tensor a32 = f32_contig(a), b32 = f32_contig(b);
  Tensor c = Tensor::empty(out_shape, DType::f32);
  ref::matmul(a32.data<float>(), b32.data<float>(), c.data<float>(), batch, m, k, n, w_batched);
  if (bias.defined()) {
    Tensor b32b = f32_contig(bias);
    float* cp = c.data<float>();
    for (int64_t r = 0; r < c.numel() / n; ++r)
      for (int64_t j = 0; j < n; ++j) cp[r * n + j] += b32b.data<float>()[j];
  }
  return c.to(a.dtype());
}

// Below this many multiply-adds a direct loop beats oneDNN's dispatch and memory-object
// set-up (~5 us); measured with bench/core_bench BM_TinyLinearOverhead.
constexpr int64_t kTinyMacs = 4096;

// c = a x b (+ bias) for tiny f32 problems: direct loop over strided views.
Tensor tiny_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const int64_t batch = shape_numel(out_shape) / std::max<int64_t>(m * n, 1);
  Tensor ac = a.contiguous(), bc = b.contiguous();
  const bool w_batched = b.numel() != k * n;
  Tensor c = Tensor::empty(out_shape, DType::f32);
  const float *pa = ac.data<float>(), *pb = bc.data<float>(), *pbias = bias.defined() ? bias.data<float>() : nullptr;
  float* pc = c.data<float>();
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* A = pa + bi * m * k;
    const float* B = pb + (w_batched ? bi * k * n : 0);
    float* C = pc + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) C[i * n + j] = pbias ? pbias[j] : 0.f;
      for (int64_t p = 0; p < k; ++p) {
        const float av = A[i * k + p];
        for (int64_t j = 0; j < n; ++j) C[i * n + j] += av * B[p * n + j];
      }
    }
  }
  return c;
}

// c = alpha a x b (+ bias) on oneDNN, reading a and b in place where it can and from
// contiguous copies otherwise; false when oneDNN has no fast kernel for the case.
bool dnnl_into(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c, RightOperand right, double alpha) {
  if (matrix_layout_ok(a) && matrix_layout_ok(b) && dnnl_matmul(row_major_left(a), b, bias, c, right, alpha)) return true;
  return dnnl_matmul(a.contiguous(), b.contiguous(), bias, c, right, alpha);
}

}  // namespace

void mm_into(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c, RightOperand right, double alpha) {
  BOOSTER_CHECK(!bias.defined() || alpha == 1.0, "mm_into: a bias with a scale is not supported");
  const int64_t nd = c.dim();
  if (nd >= 2 && c.strides()[nd - 1] != 1 && c.strides()[nd - 2] == 1 && !bias.defined()) {
    // A column-major destination: its transpose is row-major, c^T = b^T a^T.
    mm_into(b.transpose(-1, -2), a.transpose(-1, -2), bias, c.transpose(-1, -2), RightOperand::activation, alpha);
    return;
  }
  if (!use_reference() && c.dtype() == a.dtype() && matrix_layout_ok(c) && c.strides()[nd - 1] == 1 &&
      dnnl_into(a, b, bias, c, right, alpha))
    return;
  Tensor r = mm(a, b, bias, c.shape(), right);  // a new contiguous result, copied over
  if (alpha != 1.0) scale_(r, alpha);
  strided_copy(c, r);
}

/// a x b (+ bias broadcast over rows) without history; the core of matmul and linear.
Tensor mm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape, RightOperand right) {
  if (use_reference()) return ref_matmul(a, b, bias, out_shape);
  if (a.dtype() == DType::f32 && a.size(-2) * a.size(-1) * b.size(-1) <= kTinyMacs &&
      (!bias.defined() || bias.is_contiguous()))
    return tiny_matmul(a, b, bias, out_shape);
  Tensor c = Tensor::empty(out_shape, a.dtype());
  if (dnnl_into(a, b, bias, c, right, 1.0)) return c;
  if (a.dtype() != DType::f32) {  // no low-precision kernel on this CPU: compute in f32
    Tensor c32 = Tensor::empty(out_shape, DType::f32);
    Tensor a32 = to_dtype_same_layout(a, DType::f32), b32 = to_dtype_same_layout(b, DType::f32);
    if (!matrix_layout_ok(a32)) a32 = a32.contiguous();
    if (!matrix_layout_ok(b32)) b32 = b32.contiguous();
    if (dnnl_matmul(a32, b32, bias.defined() ? f32_contig(bias) : bias, c32, right, 1.0)) return c32.to(a.dtype());
  }
  return ref_matmul(a, b, bias, out_shape);
}

std::string matmul_implementation(DType t, int64_t m, int64_t k, int64_t n) {
  Tensor a = Tensor::zeros({m, k}, t), b = Tensor::zeros({k, n}, t), c = Tensor::empty({m, n}, t);
  KeyBuilder key("matmul");
  key.add(a).add(b).add(c);
  const CachedPrimitive& cp = cached_primitive(key.str(), [&] {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md_of(a), md_of(b), md_of(c)), user_scratchpad_attr(), cpu_engine());
    return std::make_pair(dnnl::primitive(dnnl::matmul(pd)), dnnl::primitive_desc_base(pd));
  });
  return cp.prim ? cp.impl : "";
}

}  // namespace kernels

// a: [..., M, K] x b: [..., K, N] -> [..., M, N]
Tensor matmul(const Tensor& a, const Tensor& b) {
  ProfileScope prof_("matmul");
  kernels::check_same_dtype("matmul", {&a, &b});
  kernels::check_floating("matmul", a);
  BOOSTER_CHECK_T(ShapeError, a.dim() >= 2 && b.dim() >= 2 && a.size(-1) == b.size(-2), "matmul: shapes ",
                  shape_str(a.shape()), " and ", shape_str(b.shape()), " do not multiply (need [..., M, K] x [..., K, N])");
  Tensor ad = a.detach(), bd = b.detach();
  Shape out_shape;
  if (b.dim() == 2 && a.dim() > 2) {  // shared right matrix: fold the batch into M
    Shape s = a.shape();
    s.back() = b.size(1);
    Tensor y = kernels::mm(ad.contiguous().view({-1, a.size(-1)}), bd, Tensor(), {a.numel() / a.size(-1), b.size(1)});
    out_shape = s;
    Tensor out = y.view(out_shape);
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    // The closure keeps the right matrix's handle, as linear does its weight's: a parameter
    // (GPT-2's Conv1D weight) that ZeRO-3 releases after the forward and gathers again for
    // the backward is read where it lives then, and its released storage is not held.
    return autograd::record("matmul", {a, b}, out, [ad, b, ga, gb](const std::vector<Tensor>& g) {
      const Tensor bd = b.detach();
      const int64_t k = ad.size(-1), n = bd.size(1);
      Tensor g2 = g[0].contiguous().view({-1, n});
      Tensor a2 = ad.contiguous().view({-1, k});
      Tensor da = ga ? kernels::mm(g2, bd.transpose(0, 1), Tensor(), {a2.size(0), k}).view(ad.shape()) : Tensor();
      Tensor db = gb ? kernels::mm_tn(a2, g2) : Tensor();
      return std::vector<Tensor>{da, db};
    });
  }
  BOOSTER_CHECK_T(ShapeError, a.dim() == b.dim(), "matmul: batch ranks differ, ", shape_str(a.shape()), " x ",
                  shape_str(b.shape()));
  for (int64_t d = 0; d < a.dim() - 2; ++d)
    BOOSTER_CHECK_T(ShapeError, a.size(d) == b.size(d), "matmul: batch dim ", d, " differs, ", shape_str(a.shape()),
                    " x ", shape_str(b.shape()));
  out_shape = a.shape();
  out_shape.back() = b.size(-1);
  Tensor out = kernels::mm(ad, bd, Tensor(), out_shape);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record("matmul", {a, b}, out, [ad, b, ga, gb](const std::vector<Tensor>& g) {
    const Tensor bd = b.detach();  // the handle kept, as above
    const int64_t nd = ad.dim();
    // dA = dC x B^T: [.., M, N] x [.., N, K];  dB = A^T x dC: [.., K, M] x [.., M, N]
    Tensor da = ga ? kernels::mm(g[0], bd.transpose(nd - 2, nd - 1), Tensor(), ad.shape()) : Tensor();
    Tensor db = gb ? kernels::mm(ad.transpose(nd - 2, nd - 1), g[0], Tensor(), bd.shape()) : Tensor();
    return std::vector<Tensor>{da, db};
  });
}

// x: [*, K], w: [N, K], b: [N] -> [*, N]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const char* label) {
  ProfileScope prof_(label);
  kernels::check_same_dtype("linear", {&x, &w, &b});
  kernels::check_floating("linear", x);
  BOOSTER_CHECK_T(ShapeError, w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ",
                  shape_str(x.shape()), " does not fit weight ", shape_str(w.shape()), " (need [*, K] and [N, K])");
  const int64_t k = w.size(1), n = w.size(0), m = x.numel() / std::max<int64_t>(k, 1);
  if (b.defined())
    BOOSTER_CHECK_T(ShapeError, b.dim() == 1 && b.size(0) == n, "linear: bias ", shape_str(b.shape()),
                    " does not fit weight ", shape_str(w.shape()));
  Tensor x2 = x.detach().contiguous().view({m, k});
  Tensor wd = w.detach();
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = kernels::mm(x2, wd.transpose(0, 1), b.defined() ? b.detach().view({1, n}) : Tensor(), {m, n});
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  const Shape x_shape = x.shape();
  // The closure keeps the weight's handle, not an alias of its storage: a parameter whose
  // storage is swapped between forward and backward (ZeRO-3 releases it after the forward
  // and gathers it again before the backward, same values) is read where it lives then, and
  // the released storage is not held by the graph.
  return autograd::record(label, {x, w, b}, y.view(out_shape), [x2, w, b, gx, gw, gb, x_shape, m, n, k](const std::vector<Tensor>& g) {
    Tensor g2 = g[0].contiguous().view({m, n});
    Tensor wd = w.detach();
    // dx = dy W: [M, N] x [N, K];  dW = dy^T x: [N, M] x [M, K];  db = column sums of dy
    // (with dW, from the product's own pass over dy where it has one)
    Tensor dx = gx ? kernels::mm(g2, wd, Tensor(), {m, k}).view(x_shape) : Tensor();
    const auto weight_grads = [g2, x2, gw, gb] {
      Tensor db;
      Tensor dw = gw ? kernels::mm_tn(g2, x2, gb ? &db : nullptr) : Tensor();
      if (gb && !gw) db = kernels::sum_dims(g2, {0}, false);
      return std::pair{dw, db};
    };
    if (gw && autograd::defer_weight_grad(w) && (!gb || autograd::defer_weight_grad(b))) {
      // Zero-bubble's W pass: the weight's (and bias's) product runs later, from the store.
      autograd::collecting_weight_grads()->add([weight_grads, w, b] {
        auto [dw, db] = weight_grads();
        return std::vector<std::pair<Tensor, Tensor>>{{w, dw}, {b, db}};
      });
      return std::vector<Tensor>{dx, Tensor(), Tensor()};
    }
    auto [dw, db] = weight_grads();
    return std::vector<Tensor>{dx, dw, db};
  });
}

namespace {

// The output gradients of stacked_linear as one [m, n] matrix: read in place when they are
// the pieces of one already (each with its output's strides, at its output's offset from
// the first), otherwise copied side by side, zeros for an output that received none.
Tensor joined_gradient(const std::vector<Tensor>& g, const std::vector<int64_t>& offs,
                       const std::vector<int64_t>& widths, const Shape& strides, int64_t m, int64_t n, DType dtype) {
  bool in_place = true;
  for (size_t i = 0; i < g.size() && in_place; ++i)
    in_place = g[i].defined() && g[i].dtype() == dtype && g[i].shares_storage(g[0]) && g[i].strides() == strides &&
               g[i].offset() == g[0].offset() + offs[i];
  if (in_place) return make_view(g[0], {m, n}, {n, 1}, g[0].offset());
  Tensor joined = Tensor::empty({m, n}, dtype);
  for (size_t i = 0; i < g.size(); ++i) {
    Tensor piece = joined.narrow(1, offs[i], widths[i]);
    if (g[i].defined()) strided_copy(piece, g[i].detach().reshape({m, widths[i]}));
    else piece.zero_();
  }
  return joined;
}

// The matrices [N_i, C] one above the other: [n = sum N_i, C], without history.
Tensor stacked_rows(const std::vector<Tensor>& ms, int64_t n) {
  Tensor out = Tensor::empty({n, ms[0].size(1)}, ms[0].dtype());
  for (size_t i = 0, row = 0; i < ms.size(); row += size_t(ms[i++].size(0)))
    strided_copy(out.narrow(0, int64_t(row), ms[i].size(0)), ms[i].detach());
  return out;
}

bool any_requires_grad(const std::vector<Tensor>& ts) {
  return std::any_of(ts.begin(), ts.end(), [](const Tensor& t) { return t.requires_grad(); });
}

// The stacked product's weight gradients, then its biases' (the ones asked for), each with its
// tensor and its own block of the stacked gradient (adopted as .grad without a copy).
std::vector<std::pair<Tensor, Tensor>> stacked_weight_grads(const Tensor& gy, const Tensor& x2,
                                                            const std::vector<Tensor>& ws, const std::vector<Tensor>& bs,
                                                            const std::vector<int64_t>& widths, bool gw, bool gb) {
  std::vector<std::pair<Tensor, Tensor>> out;
  Tensor db_all;
  if (gw) {
    std::vector<Tensor> dw = split_rows_owned(kernels::mm_tn(gy, x2, gb ? &db_all : nullptr), widths);
    for (size_t i = 0; i < ws.size(); ++i) out.emplace_back(ws[i], std::move(dw[i]));
  }
  if (gb) {
    if (!gw) db_all = kernels::sum_dims(gy, {0}, false);
    std::vector<Tensor> db = split_rows_owned(db_all, widths);
    for (size_t i = 0; i < bs.size(); ++i) out.emplace_back(bs[i], std::move(db[i]));
  }
  return out;
}

// Whether every weight and bias that requires grad may have its gradient deferred (and one does).
bool all_deferred(const std::vector<Tensor>& ws, const std::vector<Tensor>& bs) {
  bool any = false;
  for (const auto* ts : {&ws, &bs})
    for (const Tensor& t : *ts) {
      if (!t.requires_grad()) continue;
      if (!autograd::defer_weight_grad(t)) return false;
      any = true;
    }
  return any;
}

}  // namespace

// x: [*, K], w_i: [N_i, K], b_i: [N_i] -> [*, N_i] each, as one product with the stacked weights
std::vector<Tensor> stacked_linear(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs) {
  ProfileScope prof_("linear");
  BOOSTER_CHECK(!ws.empty() && (bs.empty() || bs.size() == ws.size()), "stacked_linear: ", ws.size(),
                " weights and ", bs.size(), " biases (need one or more weights and a bias for each or none)");
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), ws.begin(), ws.end());
  inputs.insert(inputs.end(), bs.begin(), bs.end());
  std::vector<const Tensor*> all;
  for (const Tensor& t : inputs) all.push_back(&t);
  kernels::check_same_dtype("stacked_linear", all);
  kernels::check_floating("stacked_linear", x);
  const int64_t k = x.size(-1), m = x.numel() / std::max<int64_t>(k, 1);
  std::vector<int64_t> offs, widths;
  std::vector<Tensor> bias_columns;  // each bias as [N_i, 1], stacked like the weights
  int64_t n = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    BOOSTER_CHECK_T(ShapeError, ws[i].dim() == 2 && ws[i].size(1) == k, "stacked_linear: input ", shape_str(x.shape()),
                    " does not fit weight ", i, " ", shape_str(ws[i].shape()), " (need [*, K] and [N, K])");
    if (!bs.empty()) {
      BOOSTER_CHECK_T(ShapeError, bs[i].defined() && bs[i].dim() == 1 && bs[i].size(0) == ws[i].size(0),
                      "stacked_linear: bias ", i, " ", bs[i].defined() ? shape_str(bs[i].shape()) : "undefined",
                      " does not fit weight ", shape_str(ws[i].shape()));
      bias_columns.push_back(bs[i].detach().view({bs[i].size(0), 1}));
    }
    offs.push_back(n);
    widths.push_back(ws[i].size(0));
    n += ws[i].size(0);
  }
  Tensor b = bs.empty() ? Tensor() : stacked_rows(bias_columns, n).view({1, n});
  Tensor x2 = x.detach().contiguous().view({m, k});
  Shape y_shape = x.shape();
  y_shape.back() = n;
  // Each output a [*, N_i] view of its columns of y (y has no history: the views record none).
  Tensor y = kernels::mm(x2, stacked_rows(ws, n).transpose(0, 1), b, {m, n}).view(y_shape);
  std::vector<Tensor> outs;
  for (size_t i = 0; i < ws.size(); ++i) outs.push_back(y.narrow(-1, offs[i], widths[i]));
  // As linear's, the closure keeps the weights' handles (not the stacked copy, which would
  // hold another copy of the weights per layer until the backward): dx stacks them again.
  const bool gx = x.requires_grad(), gw = any_requires_grad(ws), gb = any_requires_grad(bs);
  const auto backward = [x2, ws, bs, offs, widths, strides = outs[0].strides(), gx, gw, gb, m, n, x_shape = x.shape(),
                         n_inputs = inputs.size()](const std::vector<Tensor>& g) {
    Tensor gy = joined_gradient(g, offs, widths, strides, m, n, x2.dtype());
    const size_t count = ws.size();
    std::vector<Tensor> grads(n_inputs);
    // dx = dy W: [M, N] x [N, K];  dW = dy^T x: [N, M] x [M, K];  db = column sums of dy.
    // Each weight's and bias's gradient is its own block of the stacked one (adopted as
    // .grad without a copy); a block for an input without requires_grad is dropped.
    if (gx) grads[0] = kernels::mm(gy, stacked_rows(ws, n), Tensor(), {m, x2.size(1)}).view(x_shape);
    if (gw && all_deferred(ws, bs)) {  // zero-bubble's W pass: the weights' product runs later
      autograd::collecting_weight_grads()->add([gy, x2, ws, bs, widths, gb] {
        auto wg = stacked_weight_grads(gy, x2, ws, bs, widths, true, gb);
        std::erase_if(wg, [](auto& p) { return !p.first.requires_grad(); });  // a frozen one's block is dropped
        return wg;
      });
      return grads;
    }
    size_t at = 1;  // the weights' slots, then the biases'
    for (auto& wg : stacked_weight_grads(gy, x2, ws, bs, widths, gw, gb)) {
      if (!gw && at == 1) at += count;
      grads[at++] = std::move(wg.second);
    }
    return grads;
  };
  autograd::record_multi("linear", inputs, outs, backward);
  return outs;
}

}  // namespace booster
