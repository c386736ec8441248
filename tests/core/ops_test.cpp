// Every op: finite-difference gradient check on the reference path, and the fast path
// (oneDNN / vectorized) against the reference path in f32 and bf16, forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "core/autograd/engine.h"
#include "core/common/parallel.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/blocked_pack.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/matmul_tn_avx512.h"
#include "core/kernels/gelu_avx512.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "op_cases.h"

using namespace booster;
using booster::testing::OpCase;

namespace {

std::vector<Tensor> make_inputs(const OpCase& c, DType dt, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> xs;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = Tensor::empty(c.shapes[i]);
    g.normal_(t);
    auto v = t.to_vector();
    if (c.shape_values) c.shape_values(v, i);
    xs.push_back(Tensor::from_vector(v, c.shapes[i], dt).requires_grad_());
  }
  return xs;
}

// sum(out * w) in double: the scalar the gradient check differentiates.
double weighted_sum(const Tensor& out, const std::vector<float>& w) {
  auto v = out.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += double(v[i]) * w[i];
  return s;
}

struct RunResult {
  std::vector<float> out;
  std::vector<std::vector<float>> grads;
};

RunResult run(const OpCase& c, const std::vector<Tensor>& xs, const Tensor& w) {
  for (Tensor x : xs) x.set_grad(Tensor());
  Tensor out = c.fn(xs);
  out.backward(w.to(out.dtype()));
  RunResult r{out.to_vector(), {}};
  for (auto& x : xs) r.grads.push_back(x.grad().defined() ? x.grad().to_vector() : std::vector<float>());
  return r;
}

class OpTest : public ::testing::TestWithParam<OpCase> {};

// Central differences with eps = 1e-2 on f32 inputs, the loss summed in double.
// Tolerance |analytic - numeric| <= 2e-3 + 2e-2 * |numeric|: f32 rounding of the op's
// outputs contributes ~1e-7 * |loss| / eps and the O(eps^2) truncation term ~1e-4.
TEST_P(OpTest, GradCheckReference) {
  const OpCase& c = GetParam();
  kernels::ReferenceGuard ref;
  auto xs = make_inputs(c, DType::f32, 11);
  Tensor out0 = c.fn(xs);
  Generator g(99);
  Tensor w = Tensor::empty(out0.shape());
  g.uniform_(w, -1, 1);
  auto wv = w.to_vector();
  RunResult r = run(c, xs, w);
  const double eps = 1e-2;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto base = xs[i].to_vector();
    ASSERT_EQ(r.grads[i].size(), base.size()) << c.name << ": no gradient for input " << i;
    for (size_t k = 0; k < base.size(); ++k) {
      auto eval = [&](float delta) {
        NoGradGuard ng;
        std::vector<Tensor> ys = xs;
        auto v = base;
        v[k] += delta;
        ys[i] = Tensor::from_vector(v, xs[i].shape());
        return weighted_sum(c.fn(ys), wv);
      };
      const double num = (eval(float(eps)) - eval(float(-eps))) / (2 * eps);
      ASSERT_NEAR(r.grads[i][k], num, 2e-3 + 2e-2 * std::abs(num)) << c.name << " input " << i << " element " << k;
    }
  }
}

void compare(const std::vector<float>& a, const std::vector<float>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 1e-6;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * scale) << what << " element " << i << " (max |ref| " << scale << ")";
}

// f32: within 1e-5 of the largest reference magnitude. bf16: inputs and outputs are
// rounded to 8 bits of mantissa, so within 2e-2 of it (a few bf16 ulps).
TEST_P(OpTest, FastMatchesReference) {
  const OpCase& c = GetParam();
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 1e-5 : 2e-2;
    auto xs = make_inputs(c, dt, 5);
    Tensor out0 = c.fn(xs);
    const bool loss = c.name.rfind("cross_entropy", 0) == 0;  // losses are always f32
    EXPECT_EQ(out0.dtype(), loss ? DType::f32 : dt) << c.name;
    Generator g(7);
    Tensor w = Tensor::empty(out0.shape());
    g.uniform_(w, -1, 1);
    RunResult fast = run(c, xs, w);
    RunResult ref;
    {
      kernels::ReferenceGuard guard;
      ref = run(c, xs, w);
    }
    const std::string tag = c.name + " " + dtype_name(dt);
    compare(fast.out, ref.out, tol, tag + " forward");
    for (size_t i = 0; i < xs.size(); ++i) compare(fast.grads[i], ref.grads[i], tol * 2, tag + " grad " + std::to_string(i));
  }
}

// bf16 and f16 are summed where they lie, widened a piece at a time, in the order the f32
// path sums: the same bits as summing their exact f32 values.
TEST(Reduce, LowPrecisionSumsEqualTheirF32Values) {
  Tensor x = Tensor::empty({37, 700});
  Generator(3).uniform_(x, -4, 4);
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t dim : {0, 1}) {
      Tensor lp = x.to(dt);
      Tensor got = kernels::sum_dims(lp, {dim}, false), want = kernels::sum_dims(lp.to(DType::f32), {dim}, false);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.to_vector(), want.to(dt).to_vector()) << dtype_name(dt) << " dim " << dim;
    }
}

// The gradient statistics read each dtype where it lies: an inf or NaN at any position is
// found (also in a non-contiguous view), and the sum of squares is the f32 values' in double.
TEST(RawStats, NonFiniteFoundAnywhereAndSquaresSummedInDouble) {
  const int64_t n = 3 * kGrain + 77;  // several parallel blocks and a ragged tail
  Tensor x = Tensor::empty({n});
  Generator(12).uniform_(x, -3, 3);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor t = x.to(dt);
    EXPECT_TRUE(kernels::all_finite(t)) << dtype_name(dt);
    const std::vector<float> v = t.to_vector();
    double want = 0;
    for (float f : v) want += double(f) * f;
    EXPECT_NEAR(kernels::sum_squares(t), want, 1e-12 * want) << dtype_name(dt);
    for (int64_t at : {int64_t(0), kGrain - 1, kGrain, n - 1})
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        Tensor u = t.clone();
        u.slice(0, at, at + 1).fill_(bad);
        EXPECT_FALSE(kernels::all_finite(u)) << dtype_name(dt) << " at " << at << " value " << bad;
      }
    Tensor m = t.slice(0, 0, 240 * 400).view({240, 400}).clone();
    m.slice(0, 123, 124).slice(1, 321, 322).fill_(NAN);
    EXPECT_FALSE(kernels::all_finite(m.transpose(0, 1))) << dtype_name(dt) << " transposed view";
    // The largest finite values are finite.
    Tensor big = Tensor::full({5}, dt == DType::f16 ? 65504.f : 3.0e38f).to(dt);
    EXPECT_TRUE(kernels::all_finite(big)) << dtype_name(dt);
  }
}

// All of a model's gradients at once (one pass the threads split over every tensor): a bad
// value in any tensor, at either end of it, is found whatever the dtypes around it; an
// undefined gradient is skipped.
TEST(RawStats, NonFiniteFoundInAnyOfManyTensors) {
  std::vector<Tensor> ts;
  const std::vector<int64_t> sizes{5, 3 * kGrain + 77, 1, kGrain / 2, 2 * kGrain};
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor x = Tensor::empty({sizes[i]});
    Generator(20 + i).uniform_(x, -3, 3);
    ts.push_back(x.to(i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f16));
  }
  ts.insert(ts.begin() + 2, Tensor());
  EXPECT_TRUE(kernels::all_finite(ts));
  EXPECT_TRUE(kernels::all_finite(std::vector<Tensor>{}));
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].defined()) continue;
    for (int64_t at : {int64_t(0), ts[i].numel() - 1}) {
      std::vector<Tensor> us = ts;
      us[i] = ts[i].clone();
      us[i].slice(0, at, at + 1).fill_(NAN);
      EXPECT_FALSE(kernels::all_finite(us)) << "tensor " << i << " at " << at;
    }
  }
}

// LayerNorm on the fast path against the reference loops at a width with a ragged last
// vector (200 = 12 x 16 + 8) and enough rows for several threads' partial dw and db sums.
TEST(LayerNorm, FastRowsMatchTheReferenceWithGradients) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 2e-5 : 2e-2;
    Tensor x0 = Tensor::empty({300, 200}), w0 = Tensor::empty({200}), b0 = Tensor::empty({200}), g = Tensor::empty({300, 200});
    Generator(31).normal_(x0);
    Generator(32).uniform_(w0, 0.5, 1.5);
    Generator(33).uniform_(b0, -0.5, 0.5);
    Generator(34).normal_(g);
    auto run = [&](bool reference) {
      std::optional<kernels::ReferenceGuard> guard;
      if (reference) guard.emplace();
      Tensor x = x0.to(dt).clone().requires_grad_(), w = w0.to(dt).clone().requires_grad_(),
             b = b0.to(dt).clone().requires_grad_();  // fresh leaves (to() of the same dtype is the tensor itself)
      Tensor y = layer_norm(add(x, Tensor::full({1}, 3.0).to(dt)), w, b, 1e-5);  // a mean far from 0
      autograd::backward({y}, {g.to(dt)});
      return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
    };
    const auto fast = run(false), ref = run(true);
    const char* what[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i) {
      const auto a = fast[size_t(i)].to_vector(), r = ref[size_t(i)].to_vector();
      ASSERT_EQ(a.size(), r.size());
      const double scale = i >= 2 ? 30.0 : 1.0;  // dw, db sum 300 rows
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], r[k], tol * scale * (1 + std::abs(r[k]))) << dtype_name(dt) << " " << what[i] << " " << k;
    }
  }
}

// bf16 and f16 element-wise ops run where they lie and round once: the same bits as the op
// on their exact f32 values, rounded.
TEST(Binary, LowPrecisionRoundsOnceFromF32) {
  Tensor x = Tensor::empty({37, 700}), y = Tensor::empty({37, 700}), row = Tensor::empty({700});
  Generator(8).uniform_(x, -4, 4);
  Generator(9).uniform_(y, 0.5, 4);
  Generator(10).uniform_(row, 0.5, 4);
  for (DType dt : {DType::bf16, DType::f16})
    for (const Tensor& other : {y, row}) {
      Tensor a = x.to(dt), b = other.to(dt), a32 = a.to(DType::f32), b32 = b.to(DType::f32);
      const std::string tag = std::string(dtype_name(dt)) + (other.dim() == 1 ? " broadcast" : " same shape");
      EXPECT_EQ(add(a, b).to_vector(), add(a32, b32).to(dt).to_vector()) << tag;
      EXPECT_EQ(sub(a, b).to_vector(), sub(a32, b32).to(dt).to_vector()) << tag;
      EXPECT_EQ(mul(a, b).to_vector(), mul(a32, b32).to(dt).to_vector()) << tag;
      EXPECT_EQ(div(a, b).to_vector(), div(a32, b32).to(dt).to_vector()) << tag;
    }
}

// In-place add_ and mul_ (gradient accumulation, GELU's backward product) give the out-of-place
// ops' bits: bf16/f16 computed in f32 and rounded once; f32 as it is.
TEST(Binary, InPlaceGivesTheOpsBits) {
  Tensor x = Tensor::empty({37, 700}), y = Tensor::empty({37, 700});
  Generator(11).uniform_(x, -4, 4);
  Generator(12).uniform_(y, -4, 4);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor a = x.to(dt), b = y.to(dt);
    Tensor sum = a.clone(), product = a.clone();
    kernels::add_(sum, b);
    kernels::mul_(product, b);
    EXPECT_EQ(sum.to_vector(), add(a, b).to_vector()) << dtype_name(dt);
    EXPECT_EQ(product.to_vector(), mul(a, b).to_vector()) << dtype_name(dt);
  }
  Tensor wrong = Tensor::ones({3});
  EXPECT_THROW(kernels::mul_(wrong, Tensor::ones({4})), ShapeError);
}

// GELU's backward multiplies the incoming gradient in place when nothing else holds it (here,
// the gradient a later op's backward made) and into a new tensor when something does (the
// caller's own output gradient, which must come back untouched): the same gradient either way.
TEST(Gelu, BackwardInPlaceOrNotGivesTheSameGradient) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor xf = Tensor::empty({64, 300}), dyf = Tensor::empty({64, 300});
    Generator(13).uniform_(xf, -3, 3);
    Generator(14).uniform_(dyf, -1, 1);
    const Tensor dy = dyf.to(dt), one = Tensor::ones({1}, dt);
    const std::vector<float> dy_before = dy.to_vector();
    std::vector<float> grads[2];
    for (int held = 0; held < 2; ++held) {
      Tensor x = xf.to(dt).clone().requires_grad_();  // a leaf of its own each time
      Tensor y = gelu(mul(x, one));
      if (held) y.backward(dy);               // the caller holds GELU's incoming gradient
      else mul(y, one).backward(dy);          // mul's backward makes it: GELU's alone
      grads[held] = x.grad().to_vector();
    }
    EXPECT_EQ(grads[0], grads[1]) << dtype_name(dt);
    EXPECT_EQ(dy.to_vector(), dy_before) << dtype_name(dt) << ": the caller's gradient was written over";
  }
}

// Exact GELU and its gradient over [-10, 10] (and past f32's exp range) against double
// precision: f32 within 5e-7 (relative for |value| > 1), bf16 within its rounding; NaN in,
// NaN out. Where the CPU has AVX-512 this is the one-pass kernel, elsewhere oneDNN's.
TEST(Gelu, ExactFormAndGradientAgainstDouble) {
  std::vector<float> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(float(i) * 0.0025f);
  for (float v : {-20.f, -13.5f, 13.5f, 20.f, 1e-30f, -1e-30f, 0.f}) xs.push_back(v);
  const int64_t n = int64_t(xs.size());
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 5e-7 : 8e-3;
    Tensor x = Tensor::from_vector(xs, {n}).to(dt).requires_grad_();
    Tensor y = gelu(x);
    y.backward(Tensor::ones({n}, dt));
    auto xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const double v = xv[size_t(i)], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
      const double want_y = v * cdf, want_g = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
      ASSERT_NEAR(yv[size_t(i)], want_y, tol * std::max(1.0, std::abs(want_y))) << dtype_name(dt) << " gelu(" << v << ")";
      ASSERT_NEAR(gv[size_t(i)], want_g, tol * std::max(1.0, std::abs(want_g))) << dtype_name(dt) << " gelu'(" << v << ")";
    }
    Tensor nan = gelu(Tensor::full({17}, NAN, dt));
    for (float v : nan.to_vector()) EXPECT_TRUE(std::isnan(v)) << dtype_name(dt);
  }
}

// bf16 rounding in the one-pass GELU: AVX512-BF16's conversion and the integer rounding
// of other AVX-512 CPUs give the same bits (ties, NaN, infinities, tails of every length).
TEST(Gelu, Bf16RoundingIsTheSameEitherWay) {
  if (!kernels::avx512::cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU: the one-pass GELU does not run";
  std::vector<float> xs;
  for (int i = -3000; i <= 3000; ++i) xs.push_back(float(i) * 0.00371f);
  for (float v : {NAN, INFINITY, -INFINITY, 1.0f + 1.0f / 256, 3.0f + 3.0f / 128}) xs.push_back(v);
  for (int64_t n : {int64_t(xs.size()), int64_t(5), int64_t(16), int64_t(4097)}) {
    Tensor x = Tensor::from_vector(std::vector<float>(xs.begin(), xs.begin() + std::min<int64_t>(n, xs.size())),
                                   {std::min<int64_t>(n, xs.size())}).to(DType::bf16);
    const int64_t m = x.numel();
    Tensor y1 = Tensor::empty({m}, DType::bf16), d1 = Tensor::empty({m}, DType::bf16);
    Tensor y2 = Tensor::empty({m}, DType::bf16), d2 = Tensor::empty({m}, DType::bf16);
    kernels::gelu_with_grad(x.data<bf16_t>(), y1.data<bf16_t>(), d1.data<bf16_t>(), m, true);
    kernels::gelu_with_grad(x.data<bf16_t>(), y2.data<bf16_t>(), d2.data<bf16_t>(), m, false);
    EXPECT_EQ(std::memcmp(y1.raw_data(), y2.raw_data(), size_t(m) * 2), 0) << "y, " << m << " elements";
    EXPECT_EQ(std::memcmp(d1.raw_data(), d2.raw_data(), size_t(m) * 2), 0) << "y', " << m << " elements";
  }
}

// A weight gradient's product: the first one of a large shape times the ways and keeps one;
// every call, timing or not, gives the plain product's bits. Small shapes are not timed. A
// large bf16 product runs on the own tiles instead where they fit (their bits, untimed).
TEST(MatmulTN, EveryWayGivesThePlainProductsBits) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t m = 512, p = 256, q = 384;  // 5e7 multiply-adds: timed
    Tensor a = Tensor::empty({m, p}), b = Tensor::empty({m, q});
    Generator(5).uniform_(a, -1, 1);
    Generator(6).uniform_(b, -1, 1);
    a = a.to(dt), b = b.to(dt);
    const bool own = kernels::mm_tn_bf16_avx512_fits(a, b);
    Tensor plain = own ? kernels::mm_tn_bf16_avx512(a, b)
                       : kernels::mm(a.transpose(0, 1), b, Tensor(), {p, q}, kernels::RightOperand::activation);
    const std::string key = std::string(dtype_name(dt)) + " [512,256]^T x [512,384]";
    for (int call = 0; call < 2; ++call) {  // the timing call, then the chosen way
      Tensor got = kernels::mm_tn(a, b);
      ASSERT_EQ(got.shape(), (Shape{p, q}));
      EXPECT_EQ(got.to_vector(), plain.to_vector()) << dtype_name(dt) << " call " << call;
    }
    // a's column sums beside the product: the same product, and sum_dims's sums off the own
    // tiles (on them, the sums the product's pairing takes: matmul_tn_test.cpp)
    Tensor sums;
    EXPECT_EQ(kernels::mm_tn(a, b, &sums).to_vector(), plain.to_vector()) << dtype_name(dt);
    ASSERT_EQ(sums.shape(), (Shape{p}));
    ASSERT_EQ(sums.dtype(), dt);
    if (!own) {
      EXPECT_EQ(sums.to_vector(), kernels::sum_dims(a, {0}, false).to_vector()) << dtype_name(dt);
    }
    bool timed = false;
    for (const auto& line : kernels::mm_tn_choices()) timed |= line.rfind(key, 0) == 0;
    EXPECT_EQ(timed, !own) << key;
  }
  Tensor small_a = Tensor::ones({16, 8}), small_b = Tensor::ones({16, 4});
  EXPECT_EQ(kernels::mm_tn(small_a, small_b).to_vector(), std::vector<float>(32, 16.f));
  for (const auto& line : kernels::mm_tn_choices()) EXPECT_EQ(line.find("[16,8]"), std::string::npos) << line;
  EXPECT_THROW(kernels::mm_tn(Tensor::ones({3, 2}), Tensor::ones({4, 2})), ShapeError);
}

// The own packing into oneDNN's blocked weight layouts gives oneDNN's reorder's bytes: f32
// and bf16, row- and column-major sources (a weight's transpose is column-major), whole
// blocks and padded ones (K, N not multiples of the blocks), an odd bf16 row count.
TEST(BlockedPack, GivesOneDnnsReorderBytes) {
  using tag = dnnl::memory::format_tag;
  if (!kernels::avx512::cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU: oneDNN reorders";
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 128}, {96, 192}, {70, 100}, {33, 64}, {768, 192}})
      for (bool column_major : {false, true}) {
        Tensor x = Tensor::empty(column_major ? Shape{n, k} : Shape{k, n});
        Generator(3).uniform_(x, -1, 1);
        x = x.to(dt);
        const Tensor src = column_major ? x.transpose(0, 1) : x;
        const dnnl::memory::desc md({k, n}, kernels::dnnl_type(dt), dt == DType::f32 ? tag::BA16a64b : tag::BA16a64b2a);
        std::vector<uint8_t> ours(md.get_size(), 0xab), theirs(md.get_size(), 0xcd);
        ASSERT_TRUE(kernels::pack_blocked(src, md, ours.data()));
        dnnl::memory from(kernels::md_of(src), kernels::cpu_engine(), src.raw_data());
        dnnl::memory to(md, kernels::cpu_engine(), theirs.data());
        dnnl::reorder(from, to).execute(kernels::cpu_stream(), from, to);
        kernels::cpu_stream().wait();
        EXPECT_EQ(ours, theirs) << dtype_name(dt) << " [" << k << ", " << n << "]"
                                << (column_major ? " column-major" : "");
      }
  // Any other layout is left to oneDNN.
  Tensor w = Tensor::ones({64, 64});
  std::vector<uint8_t> buf(64 * 64 * 4);
  for (tag other : {tag::ab, tag::BA16a48b})
    EXPECT_FALSE(kernels::pack_blocked(w, dnnl::memory::desc({64, 64}, dnnl::memory::data_type::f32, other), buf.data()));
}

// An id outside the table, or ids that are not integers, are refused by name.
TEST(Embedding, RefusesIdsOutsideTheTableAndFloatIds) {
  Tensor w = Tensor::ones({5, 2});
  try {
    embedding(w, Tensor::from_ints({1, 5}, {2}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("id 5 at position 1 of ids [2] is outside the table of 5 rows"), std::string::npos)
        << e.what();
  }
  try {
    embedding(w, Tensor::ones({2}));
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding: ids must be integer indices (i64 or i32), got f32 [2]"), std::string::npos)
        << e.what();
  }
}

// i32 ids and targets give the embedding and the cross entropy (forward and gradients) of
// the same i64 ones, the ignored index included.
TEST(Embedding, I32IdsAndTargetsAsI64) {
  Tensor w0 = Tensor::empty({7, 4}), head = Tensor::empty({4, 7});
  Generator g(3);
  g.normal_(w0), g.normal_(head);
  const Tensor ids = Tensor::from_ints({1, 6, 1, 0, 3, 2}, {2, 3}), tgt = Tensor::from_ints({6, -100, 2, 0, 1, 1}, {6});
  auto run = [&](DType dt) {
    Tensor w = w0.clone().requires_grad_();
    Tensor loss = cross_entropy(matmul(embedding(w, ids.to(dt)).reshape({6, 4}), head), tgt.to(dt), {-100, 0.1});
    loss.backward();
    return std::make_pair(loss.item(), w.grad().to_vector());
  };
  const auto a = run(DType::i64), b = run(DType::i32);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// Class-index cross entropy on AVX-512 (full vectors and a tail, ignored rows, label
// smoothing, logits far from 0) gives the double-accumulating reference's loss and gradient.
TEST(CrossEntropy, WideRowsOnAvx512MatchTheReference) {
  if (!kernels::avx512::cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 7, c = 1013;
  Tensor x0 = Tensor::empty({n, c});
  Generator(5).normal_(x0, 0.0, 4.0);
  x0.select(0, 2).narrow(0, 0, 3).fill_(80.0);  // a row dominated by its first logits
  x0.select(0, 5).fill_(-30.0);
  const Tensor t = Tensor::from_ints({3, 1012, -100, 0, 500, 7, -100}, {n});
  for (double smoothing : {0.0, 0.1}) {
    auto run = [&](bool reference) {
      std::optional<kernels::ReferenceGuard> ref;
      if (reference) ref.emplace();
      Tensor x = x0.clone().requires_grad_();
      Tensor loss = cross_entropy(x, t, {-100, smoothing});
      loss.backward();
      return std::make_pair(loss.item(), x.grad().to_vector());
    };
    const auto fast = run(false), ref = run(true);
    EXPECT_NEAR(fast.first, ref.first, 2e-6 * std::abs(ref.first)) << "smoothing " << smoothing;
    double err = 0;
    for (size_t i = 0; i < ref.second.size(); ++i) err = std::max(err, double(std::abs(fast.second[i] - ref.second[i])));
    EXPECT_LE(err, 1e-7) << "smoothing " << smoothing;  // gradients (p - q) / 5 rows: a few ulps of 0.2
    for (int64_t j = 0; j < c; ++j) EXPECT_EQ(fast.second[size_t(2 * c + j)], 0.f);  // an ignored row
  }
}

// The backward scales its saved gradient in place only when the graph goes after it: a
// retained graph's second backward adds the same gradient again.
TEST(CrossEntropy, RetainedGraphGivesTheSameGradientTwice) {
  Tensor x = Tensor::empty({3, 40});
  Generator(6).normal_(x);
  x.requires_grad_();
  Tensor loss = cross_entropy(x, Tensor::from_ints({1, 39, 0}, {3}));
  loss.backward(Tensor(), true);
  const auto once = x.grad().to_vector();
  loss.backward();
  const auto twice = x.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(twice[i], 2 * once[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(booster::testing::op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

}  // namespace
