// The backward split into B (input gradients) and W (weight gradients), as zero-bubble
// pipelines run it: the same gradients as one backward, bit for bit, the weights' hooks
// firing in W, and autograd::grad never deferring.
#include <gtest/gtest.h>

#include "core/autograd/engine.h"
#include "core/autograd/weight_grad_store.h"
#include "core/kernels/ops.h"
#include "core/tensor/random.h"

using namespace booster;

namespace {

Tensor randn(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  default_generator().normal_(t);
  return t;
}

struct Net {
  Tensor w1 = randn({6, 4}).requires_grad_(), b1 = randn({6}).requires_grad_();
  Tensor g = randn({6}).requires_grad_(), beta = randn({6}).requires_grad_();
  Tensor q = randn({3, 6}).requires_grad_(), k = randn({5, 6}).requires_grad_();
  Tensor frozen = randn({2, 6});  // a stacked weight that needs no gradient
  std::vector<Tensor> params() const { return {w1, b1, g, beta, q, k}; }
  // linear -> layer norm -> GELU -> stacked_linear (three weights, one frozen) -> a scalar
  Tensor forward(const Tensor& x) const {
    Tensor h = gelu(layer_norm(linear(x, w1, b1), g, beta, 1e-5));
    auto outs = stacked_linear(h, {q, k, frozen});
    return sum(outs[0] * outs[0]) + sum(outs[1]) + sum(outs[2] * 0.5);
  }
};

}  // namespace

TEST(WeightGradStore, BThenWGivesTheGradientsOfOneBackward) {
  Net net;
  const Tensor x0 = randn({8, 4});
  Tensor x_ref = x0.clone().requires_grad_();
  net.forward(x_ref).backward();
  std::vector<std::vector<float>> want;
  for (auto& p : net.params()) {
    want.push_back(p.grad().to_vector());
    p.set_grad(Tensor());
  }
  int w1_hooks = 0, w1_hooks_with_grad = 0;
  auto h = net.w1.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++w1_hooks;
    w1_hooks_with_grad += p.grad().defined();
  });
  Tensor x = x0.clone().requires_grad_();
  autograd::WeightGradStore store;
  {
    autograd::StoreWeightGrads collect(&store);
    net.forward(x).backward();  // B
  }
  EXPECT_EQ(x.grad().to_vector(), x_ref.grad().to_vector()) << "B computes the input's gradient";
  EXPECT_EQ(store.size(), 2u) << "one product for the linear, one for the stacked linear";
  EXPECT_FALSE(net.w1.grad().defined());
  EXPECT_FALSE(net.q.grad().defined());
  EXPECT_FALSE(net.b1.grad().defined()) << "the bias goes with its weight's product";
  EXPECT_EQ(net.g.grad().to_vector(), want[2]) << "the norm's own gradients are not deferred";
  EXPECT_EQ(w1_hooks_with_grad, 0);
  bool called_back = false;
  auto cb = net.q.register_post_accumulate_grad_hook(
      [&](const Tensor&) { autograd::queue_callback([&] { called_back = true; }); });
  store.run();  // W
  EXPECT_TRUE(store.empty());
  EXPECT_TRUE(called_back) << "W is a backward pass: callbacks queued from hooks run at its end";
  EXPECT_EQ(w1_hooks_with_grad, 1);
  EXPECT_EQ(w1_hooks, 2) << "the leaf's hook fires in B (no gradient yet) and in W";
  const auto params = net.params();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(params[i].grad().to_vector(), want[i]) << "parameter " << i;
  EXPECT_FALSE(net.frozen.grad().defined());
}

TEST(WeightGradStore, GradNeverDefersAndNothingDefersOutsideTheScope) {
  Net net;
  const Tensor x = randn({8, 4});
  autograd::WeightGradStore store;
  std::vector<Tensor> got;
  {
    autograd::StoreWeightGrads collect(&store);
    got = autograd::grad({net.forward(x)}, {Tensor()}, {net.w1, net.q});
  }
  EXPECT_TRUE(store.empty());
  ASSERT_TRUE(got[0].defined() && got[1].defined());
  net.forward(x).backward();
  EXPECT_EQ(net.w1.grad().to_vector(), got[0].to_vector());
  EXPECT_EQ(net.q.grad().to_vector(), got[1].to_vector());
  EXPECT_TRUE(store.empty());
  EXPECT_EQ(autograd::collecting_weight_grads(), nullptr);
}
