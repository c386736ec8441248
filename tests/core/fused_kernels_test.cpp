// kernels::FusedKernels: with the fused kernels off, attention and the norms run as the plain
// ops they amount to (which the profile shows), with the fused kernels' values and
// gradients; on, the fused ones run.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "core/common/profiler.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"

using namespace booster;

namespace {

// Restores the fused kernels however a test ends.
struct FusedScope {
  explicit FusedScope(kernels::FusedKernels f) { kernels::set_fused_kernels(f); }
  ~FusedScope() { kernels::set_fused_kernels({}); }
};

Tensor random(Shape shape, uint64_t seed, DType dt) {
  Tensor t = Tensor::empty(shape);
  Generator(seed).normal_(t);
  return t.to(dt).requires_grad_();
}

struct Run {
  Tensor out;
  std::vector<Tensor> grads;
  std::set<std::string> ops;  // the profiled op names, forward and backward
};

// f on fresh leaves of `shapes`, its output weighted and summed, backward.
Run run(const std::vector<Shape>& shapes, DType dt, const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(random(shapes[i], 11 + i, dt));
  Profiler::reset();
  Profiler::enable(true);
  Run r;
  r.out = f(in);
  Tensor w = Tensor::empty(r.out.shape());
  Generator(5).uniform_(w, -1, 1);
  sum(mul(r.out, w.to(dt))).backward();
  Profiler::enable(false);
  for (auto& e : Profiler::entries()) r.ops.insert(e.name);
  for (auto& x : in) r.grads.push_back(x.grad());
  return r;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  auto x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol) << what << " element " << i;
}

// The op fused and plain: the same values and gradients; `plain_op` runs only in the plain path.
void check(const std::string& name, const std::vector<Shape>& shapes, const std::string& plain_op,
           const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = dt == DType::f32 ? 3e-5 : 4e-2;
    const std::string tag = name + " " + dtype_name(dt) + ": ";
    const Run fused = run(shapes, dt, f);
    Run plain;
    {
      FusedScope off({false, false});
      plain = run(shapes, dt, f);
    }
    EXPECT_EQ(fused.ops.count(plain_op), 0u) << tag << "the fused kernel ran " << plain_op;
    EXPECT_EQ(plain.ops.count(plain_op), 1u) << tag << "the plain ops did not run " << plain_op;
    EXPECT_EQ(plain.out.dtype(), dt) << tag;
    expect_close(plain.out, fused.out, tol, tag + "output");
    for (size_t i = 0; i < shapes.size(); ++i)
      if (fused.grads[i].defined()) expect_close(plain.grads[i], fused.grads[i], 2 * tol, tag + "gradient " + std::to_string(i));
  }
}

TEST(FusedKernels, PlainNormsMatchTheFusedOnes) {
  check("layer_norm", {{6, 40}, {40}, {40}}, "rsqrt",
        [](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2], 1e-5); });
  check("layer_norm without affine", {{3, 5, 24}}, "rsqrt",
        [](const std::vector<Tensor>& t) { return layer_norm(t[0], Tensor(), Tensor(), 1e-6); });
  check("rms_norm", {{2, 7, 32}, {32}}, "rsqrt", [](const std::vector<Tensor>& t) { return rms_norm(t[0], t[1], 1e-6); });
}

TEST(FusedKernels, PlainAttentionMatchesTheFusedOne) {
  const Shape heads{2, 3, 19, 16};  // [B, h, T, d]
  check("scaled_dot_product_attention", {heads, heads, heads}, "softmax",
        [](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); });
  check("causal_attention", {heads, heads, heads}, "softmax",
        [](const std::vector<Tensor>& t) { return causal_attention(t[0], t[1], t[2]); });
}

TEST(FusedKernels, RsqrtAndItsGradient) {
  Tensor x = Tensor::from_vector({0.25f, 1.0f, 4.0f}, {3}).requires_grad_();
  Tensor y = rsqrt(x);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2.0f, 1.0f, 0.5f}));
  sum(y).backward();
  // d/dx x^(-1/2) = -x^(-3/2) / 2
  expect_close(x.grad(), Tensor::from_vector({-4.0f, -0.5f, -0.0625f}, {3}), 1e-6, "rsqrt'");
}

}  // namespace
