// scaled_dot_product_attention: the same values as its composite (matmul, scale, softmax,
// matmul) on the fast path, and the layouts it promises (context in [B, T, h, d] memory,
// gradients laid out like their inputs). Gradient checks and fast-vs-reference comparisons
// run from the op table (op_cases.cpp).
#include <gtest/gtest.h>

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute (exp2_16 below).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <optional>

#include "core/autograd/node.h"
#include "core/kernels/attention_avx512.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/avx512_math.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"

using namespace booster;

namespace {

// q, k, v: [B, T, h, d] leaves, fed in as [B, h, T, d] head views.
struct Heads {
  Tensor q, k, v;
  explicit Heads(DType dt, uint64_t seed = 3, int64_t b = 2, int64_t t = 33, int64_t h = 3, int64_t d = 16) {
    Generator g(seed);
    for (Tensor* x : {&q, &k, &v}) {
      Tensor f = Tensor::empty({b, t, h, d});
      g.normal_(f);
      *x = f.to(dt).requires_grad_();
    }
  }
  static Tensor view(const Tensor& x) { return x.permute({0, 2, 1, 3}); }
};

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  auto x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol) << what << " element " << i;
}

// Small heads, and long ones whose scores (9.7 MB an image in f32, 4.8 in bf16) exceed the
// op's 8 MB pass (4.8 in bf16 and f16): it then runs the batch an image at a time, in three
// passes.
TEST(Attention, MatchesItsCompositeWithGradients) {
  struct Case { int64_t b, t, h, d; };
  for (const Case& c : {Case{2, 33, 3, 16}, Case{3, 1100, 2, 8}})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {  // f16: oneDNN's fallbacks
      const double tol = dt == DType::f32 ? 2e-5 : 3e-2;
      const std::string tag = std::string(dtype_name(dt)) + " T " + std::to_string(c.t) + ": ";
      Heads a(dt, 3, c.b, c.t, c.h, c.d), b(dt, 4, c.b, c.t, c.h, c.d);
      b.q = a.q.detach().clone().requires_grad_();
      b.k = a.k.detach().clone().requires_grad_();
      b.v = a.v.detach().clone().requires_grad_();
      Tensor fused = scaled_dot_product_attention(Heads::view(a.q), Heads::view(a.k), Heads::view(a.v));
      const double s = 1.0 / std::sqrt(double(c.d));
      Tensor composite = matmul(softmax(scale(matmul(Heads::view(b.q), Heads::view(b.k).transpose(-1, -2)), s)),
                                Heads::view(b.v));
      expect_close(fused, composite, tol, tag + "context");
      Tensor w = Tensor::empty(fused.shape());
      Generator(9).uniform_(w, -1, 1);
      sum(mul(fused, w.to(dt))).backward();
      sum(mul(composite, w.to(dt))).backward();
      expect_close(a.q.grad(), b.q.grad(), 2 * tol, tag + "dq");
      expect_close(a.k.grad(), b.k.grad(), 2 * tol, tag + "dk");
      expect_close(a.v.grad(), b.v.grad(), 2 * tol, tag + "dv");
    }
}

// Queries and keys of different lengths, head widths that are not whole vectors (24, 40)
// and a value width unlike the key's: what the head-at-a-time kernels meet at the edges of
// their tiles and panels. Rows of keys shorter than a vector (3, 5, 7: the kernels store a
// row's probabilities with whole vectors where the lanes past it stay in the head, the
// head's last rows masked; a head of 2 x 7 is all masked), and heads next to each other
// taken by different threads.
TEST(Attention, CrossAttentionAndRaggedWidthsMatchTheComposite) {
  struct Case { int64_t tq, tk; };
  for (const Case& c : {Case{29, 45}, Case{9, 3}, Case{6, 5}, Case{2, 7}, Case{4, 17}})
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t b = 2, h = 3, tq = c.tq, tk = c.tk, d = 24, dv = 40;
    const double tol = dt == DType::f32 ? 2e-5 : 3e-2;
    const std::string tag = std::string(dtype_name(dt)) + " " + std::to_string(tq) + " x " + std::to_string(tk);
    Generator g(21);
    auto leaf = [&](int64_t t, int64_t w) {
      Tensor x = Tensor::empty({b, t, h, w});
      g.normal_(x);
      return x.to(dt).requires_grad_();
    };
    Tensor q = leaf(tq, d), k = leaf(tk, d), v = leaf(tk, dv);
    Tensor q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_(),
           v2 = v.detach().clone().requires_grad_();
    Tensor fused = scaled_dot_product_attention(Heads::view(q), Heads::view(k), Heads::view(v), 0.0, 0.3);
    Tensor composite =
        matmul(softmax(scale(matmul(Heads::view(q2), Heads::view(k2).transpose(-1, -2)), 0.3)), Heads::view(v2));
    expect_close(fused, composite, tol, tag + " context");
    Tensor w = Tensor::empty(fused.shape());
    Generator(9).uniform_(w, -1, 1);
    sum(mul(fused, w.to(dt))).backward();
    sum(mul(composite, w.to(dt))).backward();
    expect_close(q.grad(), q2.grad(), 2 * tol, tag + " dq");
    expect_close(k.grad(), k2.grad(), 2 * tol, tag + " dk");
    expect_close(v.grad(), v2.grad(), 2 * tol, tag + " dv");
  }
}

// A non-finite score makes its row's probabilities NaN (as exp(x - max) does), and only
// that row's: an inf in one query leaves every other query's context finite.
TEST(Attention, NonFiniteScoresPoisonOnlyTheirRow) {
  for (DType dt : {DType::f32, DType::bf16})
  for (float bad : {INFINITY, NAN}) {
    Heads x(dt);
    Tensor q = x.q.detach().clone();
    q.slice(0, 1, 2).slice(1, 5, 6).slice(2, 2, 3).fill_(bad);  // image 1, token 5, head 2
    Tensor out = scaled_dot_product_attention(Heads::view(q), Heads::view(x.k.detach()), Heads::view(x.v.detach()));
    Tensor ctx = out.permute({0, 2, 1, 3}).contiguous();  // [B, T, h, d]
    const std::vector<float> c = ctx.to_vector();
    const int64_t t = ctx.size(1), h = ctx.size(2), d = ctx.size(3);
    for (int64_t i = 0; i < int64_t(c.size()); ++i) {
      const int64_t bi = i / (t * h * d), ti = i / (h * d) % t, hi = i / d % h;
      const bool poisoned = bi == 1 && ti == 5 && hi == 2;
      ASSERT_EQ(std::isnan(c[size_t(i)]), poisoned) << dtype_name(dt) << " value " << bad << " element " << i;
    }
  }
}

// The exponential of softmax and of GELU (exp2_nonpositive) against double precision
// over [-126, 0]: within its polynomial's bound (degree 5: 1.8e-7 relative, degree 4: 3.5e-6)
// and 1 ulp; 0 below -126 and at -inf; NaN stays NaN (which makes a row of NaN scores NaN).
template <int Degree>
BOOSTER_AVX512 std::vector<float> exp2_16(const float* t) {
  std::vector<float> out(16);
  _mm512_storeu_ps(out.data(), kernels::avx512::exp2_nonpositive<Degree>(_mm512_loadu_ps(t)));
  return out;
}

template <int Degree>
void expect_exp2_within(double bound) {
  std::vector<float> ts;
  for (int i = 0; i <= 126000; ++i) ts.push_back(-float(i) * 1e-3f);
  for (float v : {-1e-30f, -0.0f, -1.0f + 1e-7f, -126.5f, -200.f, -1e30f, -INFINITY, NAN}) ts.push_back(v);
  while (ts.size() % 16) ts.push_back(0.0f);
  for (size_t i = 0; i < ts.size(); i += 16) {
    const std::vector<float> e = exp2_16<Degree>(ts.data() + i);
    for (size_t j = 0; j < 16; ++j) {
      const float t = ts[i + j];
      if (std::isnan(t)) {
        EXPECT_TRUE(std::isnan(e[j])) << "2^NaN";
      } else if (t < -126.0f) {
        EXPECT_EQ(e[j], 0.0f) << "2^" << t;
      } else {
        const double want = std::exp2(double(t));
        ASSERT_NEAR(e[j], want, want * (bound + 1.2e-7)) << "degree " << Degree << ": 2^" << t;
      }
    }
  }
}

TEST(Attention, SoftmaxExponentialAgainstDouble) {
  if (!kernels::avx512::cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  expect_exp2_within<5>(1.8e-7);
  expect_exp2_within<4>(3.6e-6);
}

// Which path runs: the head-at-a-time kernels for f32 on AVX-512 CPUs and bf16 on AVX512-BF16
// ones (without AMX); odd bf16 head widths (a pair would straddle two heads) and f16 take
// oneDNN's batched products, and give the composite's values there too.
TEST(Attention, HeadKernelsWhereTheyFitAndOneDnnElsewhere) {
  Heads f(DType::f32), h(DType::f16);
  EXPECT_EQ(kernels::attention_avx512_fits(Heads::view(f.q), Heads::view(f.k), Heads::view(f.v)),
            kernels::avx512::cpu_ok());
  EXPECT_FALSE(kernels::attention_avx512_fits(Heads::view(h.q), Heads::view(h.k), Heads::view(h.v)));
  Heads odd(DType::bf16, 5, 2, 19, 3, 15);
  EXPECT_FALSE(kernels::attention_avx512_fits(Heads::view(odd.q), Heads::view(odd.k), Heads::view(odd.v)));
  Tensor fused = scaled_dot_product_attention(Heads::view(odd.q), Heads::view(odd.k), Heads::view(odd.v));
  Tensor composite = matmul(softmax(scale(matmul(Heads::view(odd.q), Heads::view(odd.k).transpose(-1, -2)),
                                          1.0 / std::sqrt(15.0))),
                            Heads::view(odd.v));
  expect_close(fused, composite, 3e-2, "bf16 d 15");
}

TEST(Attention, ContextAndGradientsKeepTheHeadLayout) {
  Heads h(DType::f32);
  Tensor q = Heads::view(h.q), k = Heads::view(h.k), v = Heads::view(h.v);
  Tensor ctx = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(ctx.permute({0, 2, 1, 3}).is_contiguous()) << "context not in [B, T, h, d] memory";
  // The op's own backward: each gradient in its input's layout, so permuting it back to
  // [B, T, h, d] (the view's backward) is contiguous without a copy.
  std::vector<Tensor> grads = ctx.grad_fn()->apply({Tensor::ones(ctx.shape())});
  ASSERT_EQ(grads.size(), 3u);
  EXPECT_EQ(grads[0].strides(), q.strides());
  EXPECT_EQ(grads[1].strides(), k.strides());
  EXPECT_EQ(grads[2].strides(), v.strides());
}

// q, k and v from one stacked product (as ViT's self-attention runs them): the same values
// and gradients as three linears, and the attention's gradients come back as the pieces of
// one [B, T, 3 x h x d] gradient, which the stacked product's backward reads without a copy.
TEST(Attention, StackedProjectionsMatchThreeLinearsAndShareOneGradient) {
  const int64_t b = 2, t = 33, h = 3, d = 16, c = h * d;
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 2e-5 : 4e-2;
    Generator g(11);
    auto leaf = [&](const Shape& s) {
      Tensor f = Tensor::empty(s);
      g.uniform_(f, -0.5, 0.5);
      return f.to(dt).requires_grad_();
    };
    std::vector<Tensor> in{leaf({b, t, c}), leaf({c, c}), leaf({c, c}), leaf({c, c}), leaf({c}), leaf({c}), leaf({c})};
    std::vector<Tensor> in2;
    for (const Tensor& x : in) in2.push_back(x.detach().clone().requires_grad_());
    auto heads = [&](const Tensor& x) { return x.view({b, t, h, d}).permute({0, 2, 1, 3}); };
    std::vector<Tensor> qkv = stacked_linear(in[0], {in[1], in[2], in[3]}, {in[4], in[5], in[6]});
    Tensor stacked = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
    Tensor separate = scaled_dot_product_attention(heads(linear(in2[0], in2[1], in2[4])),
                                                   heads(linear(in2[0], in2[2], in2[5])),
                                                   heads(linear(in2[0], in2[3], in2[6])));
    const std::string tag = std::string(dtype_name(dt)) + " ";
    expect_close(stacked, separate, tol, tag + "context");
    std::vector<Tensor> pieces = stacked.grad_fn()->apply({Tensor::ones(stacked.shape(), dt)});
    ASSERT_EQ(pieces.size(), 3u);
    EXPECT_TRUE(pieces[0].shares_storage(pieces[1]) && pieces[1].shares_storage(pieces[2])) << tag;
    EXPECT_EQ(pieces[1].offset() - pieces[0].offset(), c) << tag;
    Tensor w = Tensor::empty(stacked.shape());
    Generator(9).uniform_(w, -1, 1);
    sum(mul(stacked, w.to(dt))).backward();
    sum(mul(separate, w.to(dt))).backward();
    const char* names[] = {"dx", "dWq", "dWk", "dWv", "dbq", "dbk", "dbv"};
    for (size_t i = 0; i < in.size(); ++i) expect_close(in[i].grad(), in2[i].grad(), 4 * tol, tag + names[i]);
    // The weights' gradients are adopted as the blocks of the one product, not copied.
    EXPECT_EQ(static_cast<char*>(in[2].grad().raw_data()) - static_cast<char*>(in[1].grad().raw_data()),
              c * c * int64_t(dtype_size(dt)))
        << tag;
  }
  // Mismatched inputs are refused by name.
  EXPECT_THROW(stacked_linear(Tensor::ones({2, 8}), {Tensor::ones({4, 8}), Tensor::ones({4, 7})}), ShapeError);
  EXPECT_THROW(stacked_linear(Tensor::ones({2, 8}), {Tensor::ones({4, 8})}, {Tensor::ones({5})}), ShapeError);
  EXPECT_THROW(stacked_linear(Tensor::ones({2, 8}), {Tensor::ones({4, 8}), Tensor::ones({4, 8}, DType::bf16)}),
               DTypeError);
}

TEST(Attention, DropoutFollowsTheDefaultGenerator) {
  Heads h(DType::f32);
  manual_seed(5);
  Tensor a = scaled_dot_product_attention(Heads::view(h.q), Heads::view(h.k), Heads::view(h.v), 0.3);
  manual_seed(5);
  Tensor b = matmul(dropout(softmax(scale(matmul(Heads::view(h.q), Heads::view(h.k).transpose(-1, -2)), 0.25)), 0.3, true),
                    Heads::view(h.v));
  expect_close(a, b, 1e-5, "dropout context");
  Tensor c = scaled_dot_product_attention(Heads::view(h.q), Heads::view(h.k), Heads::view(h.v));
  EXPECT_GT(std::abs(a.to_vector()[0] - c.to_vector()[0]) + std::abs(a.to_vector()[7] - c.to_vector()[7]), 0.0f);
}

TEST(Attention, RefusesShapesThatDoNotFit) {
  Tensor q = Tensor::empty({2, 3, 5, 4}), k = Tensor::empty({2, 3, 6, 8}), v = Tensor::empty({2, 3, 6, 4});
  try {
    scaled_dot_product_attention(q, k, v);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3, 6, 8]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::empty({2, 3, 6, 4}), v, 1.0), std::exception);
}

}  // namespace

// Causal attention on its fast path against the masked composite (the reference), f32 and
// bf16, heads short and long: 100 tokens cross the forward's 48-row blocks, 300 the tiles'
// 64-column blocks; values and the three gradients.
TEST(CausalAttention, MatchesTheMaskedCompositeWithGradients) {
  struct Case { int64_t b, t, h, d; };
  for (const Case& c : {Case{2, 33, 3, 16}, Case{1, 100, 2, 8}, Case{1, 300, 2, 32}})
    for (DType dt : {DType::f32, DType::bf16}) {
      const double tol = dt == DType::f32 ? 2e-5 : 3e-2;
      const std::string tag = std::string(dtype_name(dt)) + " T " + std::to_string(c.t) + ": ";
      Heads a(dt, 5, c.b, c.t, c.h, c.d), b(dt, 5, c.b, c.t, c.h, c.d);
      Tensor fast = causal_attention(Heads::view(a.q), Heads::view(a.k), Heads::view(a.v));
      Tensor ref;
      {
        kernels::ReferenceGuard rg;
        ref = causal_attention(Heads::view(b.q), Heads::view(b.k), Heads::view(b.v));
      }
      expect_close(fast, ref, tol, tag + "context");
      Generator g(9);
      Tensor w = Tensor::empty(fast.shape());
      g.normal_(w);
      sum(mul(fast, w.to(dt))).backward();
      {
        kernels::ReferenceGuard rg;
        sum(mul(ref, w.to(dt))).backward();
      }
      expect_close(a.q.grad(), b.q.grad(), tol * 2, tag + "dq");
      expect_close(a.k.grad(), b.k.grad(), tol * 2, tag + "dk");
      expect_close(a.v.grad(), b.v.grad(), tol * 2, tag + "dv");
    }
}

// FlashAttention's blocks (ring attention's steps), on the fast path and the reference: a
// causal sequence of 100 cut at 40 into a causal block (rows and keys 0..39), a full block
// (rows 40..99 over keys 0..39) and a causal one (rows and keys 40..99); the rows' two blocks
// combined by their log-sum-exps give causal attention's context, and the blocks' gradients,
// from the whole rows' lse and <dO, O>, sum to its gradients.
TEST(AttentionBlock, BlocksCombineToCausalAttentionWithGradients) {
  const int64_t t = 100, cut = 40;
  Heads a(DType::f32, 7, 2, t, 3, 16);
  Tensor ref = causal_attention(Heads::view(a.q), Heads::view(a.k), Heads::view(a.v));
  Generator g(11);
  Tensor w = Tensor::empty(ref.shape());
  g.normal_(w);
  sum(mul(ref, w)).backward();
  const Tensor q = Heads::view(a.q.detach()), k = Heads::view(a.k.detach()), v = Heads::view(a.v.detach());
  auto rows = [](const Tensor& x, int64_t b, int64_t n) { return x.narrow(2, b, n); };
  for (bool reference : {false, true}) {
    std::optional<kernels::ReferenceGuard> guard;
    if (reference) guard.emplace();
    const std::string tag = reference ? "reference: " : "fast: ";
    AttentionBlock head = attention_block_forward(rows(q, 0, cut), rows(k, 0, cut), rows(v, 0, cut), true, 0.25);
    AttentionBlock left = attention_block_forward(rows(q, cut, t - cut), rows(k, 0, cut), rows(v, 0, cut), false, 0.25);
    AttentionBlock diag = attention_block_forward(rows(q, cut, t - cut), rows(k, cut, t - cut), rows(v, cut, t - cut), true, 0.25);
    // the later rows: the two blocks weighted by their shares of the combined log-sum-exp
    const auto la = left.lse.to_vector(), lb = diag.lse.to_vector(), oa = left.out.to_vector(), ob = diag.out.to_vector();
    std::vector<float> lt(la.size()), ot(oa.size());
    for (size_t i = 0; i < la.size(); ++i) {
      const float m = std::max(la[i], lb[i]), wa = std::exp(la[i] - m), wb = std::exp(lb[i] - m);
      lt[i] = m + std::log(wa + wb);
      for (size_t c = 0; c < 16; ++c) ot[i * 16 + c] = (oa[i * 16 + c] * wa + ob[i * 16 + c] * wb) / (wa + wb);
    }
    const Tensor lse_tail = Tensor::from_vector(lt, left.lse.shape()), tail = Tensor::from_vector(ot, left.out.shape());
    expect_close(concat({head.out, tail}, 2), ref, 2e-5, tag + "context");
    const Tensor lse = concat({head.lse, lse_tail}, 2), go = w.contiguous();
    const Tensor delta = sum(mul(go, ref.detach()), {3});
    auto back = [&](int64_t r0, int64_t rn, int64_t k0, int64_t kn, bool causal) {
      return attention_block_backward(rows(q, r0, rn), rows(k, k0, kn), rows(v, k0, kn), rows(go, r0, rn),
                                      rows(lse, r0, rn), delta.narrow(2, r0, rn), causal, 0.25);
    };
    auto gh = back(0, cut, 0, cut, true), gl = back(cut, t - cut, 0, cut, false), gd = back(cut, t - cut, cut, t - cut, true);
    expect_close(concat({gh[0], add(gl[0], gd[0])}, 2), Heads::view(a.q.grad()), 5e-5, tag + "dq");
    expect_close(concat({add(gh[1], gl[1]), gd[1]}, 2), Heads::view(a.k.grad()), 5e-5, tag + "dk");
    expect_close(concat({add(gh[2], gl[2]), gd[2]}, 2), Heads::view(a.v.grad()), 5e-5, tag + "dv");
  }
}
