// Autograd semantics: backward forms, accumulation, retain_grad, hooks, no-grad, errors.
#include <gtest/gtest.h>

#include "core/autograd/engine.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"
#include "core/tensor/allocator.h"

#include <cmath>
#include <optional>

using namespace booster;

namespace {
Tensor leaf(std::vector<float> v, Shape s) { return Tensor::from_vector(v, s).requires_grad_(); }
}  // namespace

TEST(Autograd, ScalarBackwardAndAccumulation) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(x * x);  // dy/dx = 2x
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 4, 6}));
  sum(x * 3.0).backward();  // accumulates: + 3
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{5, 7, 9}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, BackwardWithGivenGradient) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * x;
  y.backward(Tensor::from_vector({1, 0, 0, 2}, {2, 2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 0, 0, 16}));
}

TEST(Autograd, ErrorsAreClear) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * 2.0;
  try {
    y.backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("one-element"), std::string::npos) << e.what();
  }
  try {
    y.backward(Tensor::ones({4}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
  }
  Tensor b = Tensor::ones({2, 2}, DType::bf16);
  try {
    add(x, b);
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("add: dtype mismatch, f32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::ones({2}).backward(), AutogradError);  // nothing requires grad
  EXPECT_THROW(Tensor::ones({2}, DType::i64).requires_grad_(), DTypeError);
  EXPECT_THROW(x.fill_(0), AutogradError);  // in-place on a leaf that requires grad
}

TEST(Autograd, FreedGraphIsAnError) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(gelu(x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();  // allowed: the graph was retained
  try {
    y.backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(x));
  Tensor y = sum(x * d);  // gradient flows only through x: d/dx = d
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 2}));
}

TEST(Autograd, NonLeafGradientOnRequest) {
  // A pipeline stage needs the gradient of its (non-leaf) input.
  Tensor x = leaf({1, -1, 2}, {3});
  Tensor h = x * 3.0;
  h.retain_grad();
  Tensor y = sum(h * h);
  y.backward();
  EXPECT_EQ(h.grad().to_vector(), (std::vector<float>{6, -6, 12}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{18, -18, 36}));
  // A received activation is a leaf with requires_grad: its .grad is the stage's output.
  Tensor recv = leaf({0.5f}, {1});
  sum(recv * 4.0).backward();
  EXPECT_EQ(recv.grad().to_vector()[0], 4.0f);
}

TEST(Autograd, DiamondSumsBeforeLeafHookFires) {
  Tensor x = leaf({2}, {1});
  int fired = 0;
  float seen = 0;
  auto hook = x.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++fired;
    seen = p.grad().to_vector()[0];
  });
  Tensor a = x * 3.0, b = x * x;
  sum(a + b).backward();  // d/dx = 3 + 2x = 7, reached by two paths
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(seen, 7.0f);
}

TEST(Autograd, HooksFireLastUsedFirst) {
  // Three "layers": the last one's parameter must get its final gradient first, so that
  // data parallel can start its all-reduce while backward continues.
  Tensor w1 = leaf({1, 0, 0, 1}, {2, 2}), w2 = leaf({1, 0, 0, 1}, {2, 2}), w3 = leaf({1, 0, 0, 1}, {2, 2});
  std::vector<int> order;
  auto h1 = w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(1); });
  auto h2 = w2.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(2); });
  auto h3 = w3.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(3); });
  Tensor x = Tensor::ones({4, 2});
  Tensor y = sum(linear(linear(linear(x, w1), w2), w3));
  y.backward();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST(Autograd, HookHandleRemovesItsHookOnly) {
  Tensor w = leaf({1, 2}, {2});
  std::vector<int> fired;
  auto keep = w.register_post_accumulate_grad_hook([&](const Tensor&) { fired.push_back(1); });
  {
    auto gone = w.register_post_accumulate_grad_hook([&](const Tensor&) { fired.push_back(2); });
    sum(w * 2.0).backward();
  }  // `gone` destroyed: its hook must not fire again
  sum(w * 2.0).backward();
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 1}));
  keep.remove();
  EXPECT_FALSE(keep.active());
  sum(w * 2.0).backward();
  EXPECT_EQ(fired.size(), 3u);
  // A hook may remove itself while it runs.
  HookHandle self;
  int n = 0;
  self = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++n, self.remove(); });
  sum(w * 2.0).backward();
  sum(w * 2.0).backward();
  EXPECT_EQ(n, 1);
}

TEST(Autograd, LowPrecisionLeafGetsGradOfItsDtype) {
  Tensor x = Tensor::ones({3}, DType::bf16).requires_grad_();
  sum(x * x).backward();
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 2, 2}));
}

TEST(Autograd, ParameterIdentitySurvivesSetData) {
  Tensor w = leaf({1, 2, 3, 4}, {4});
  Tensor same = w;  // another handle, e.g. an optimizer's
  {
    NoGradGuard ng;
    w.set_data(w.detach().narrow(0, 2, 2).contiguous());  // "reshard" to a slice
  }
  EXPECT_TRUE(same.is_same(w));
  EXPECT_EQ(same.shape(), (Shape{2}));
  sum(w * w).backward();
  EXPECT_EQ(same.grad().to_vector(), (std::vector<float>{6, 8}));
}

TEST(Autograd, GradGivesInputGradientsAndWritesNoGrad) {
  Tensor a = leaf({1, 2, 3}, {3}), b = leaf({4, 5, 6}, {3}), c = leaf({1, 1, 1}, {3});
  Tensor y = sum(a * b);
  auto g = autograd::grad({y}, {Tensor()}, {a, c});  // c is not reached
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(a.grad().defined());  // nothing accumulated, the other leaf passed over
  EXPECT_FALSE(b.grad().defined());
  Tensor nonleaf = a * 2.0;
  EXPECT_THROW(autograd::grad({sum(nonleaf)}, {Tensor()}, {nonleaf}), AutogradError);
}

// queue_callback (PyTorch's queue_callback): runs once the whole backward is done (every
// leaf's gradient written), in the order queued, from the outermost backward when one runs
// inside another's node; a callback may queue another; outside a backward it is an error,
// and a backward that throws drops its callbacks.
TEST(Autograd, QueuedCallbacksRunAtTheEndOfTheOutermostBackward) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3}, {1});
  std::vector<std::string> log;
  auto h = a.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("hook a");
    autograd::queue_callback([&] {
      log.push_back(b.grad().defined() ? "first, b done" : "first, b missing");
      autograd::queue_callback([&] { log.push_back("queued by the first"); });
    });
    autograd::queue_callback([&] { log.push_back("second"); });
  });
  EXPECT_FALSE(autograd::in_backward());
  (sum(a * 2.0) + sum(b * b)).backward();  // b's leaf may finish after a's
  EXPECT_EQ(log, (std::vector<std::string>{"hook a", "first, b done", "second", "queued by the first"}));

  // From a node whose backward runs a backward of its own: the callback waits for the outer one.
  log.clear();
  Tensor c = leaf({5}, {1});
  Tensor inner = autograd::record("RunsABackward", {b}, b * 1.0, [&](const std::vector<Tensor>& g) {
    autograd::GradMode::set_enabled(true);  // backward runs its nodes without recording
    sum(a * 3.0).backward();                // a's hook queues its callbacks here
    autograd::GradMode::set_enabled(false);
    log.push_back(autograd::in_backward() ? "inner done, still in backward" : "not in backward");
    return std::vector<Tensor>{g[0]};
  });
  (sum(inner) + sum(c)).backward();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0], "hook a");
  EXPECT_EQ(log[1], "inner done, still in backward");
  EXPECT_EQ(log.back(), "queued by the first");
  h.remove();

  EXPECT_THROW(autograd::queue_callback([] {}), AutogradError);
  bool ran = false;
  Tensor d = leaf({1}, {1});
  Tensor boom = autograd::record("Throws", {d}, d * 1.0, [&](const std::vector<Tensor>&) -> std::vector<Tensor> {
    autograd::queue_callback([&] { ran = true; });
    throw ValueError("boom");
  });
  EXPECT_THROW(sum(boom).backward(), ValueError);
  EXPECT_FALSE(ran);
  EXPECT_FALSE(autograd::in_backward());
  sum(d * 2.0).backward();  // the dropped callback does not run on the next backward either
  EXPECT_FALSE(ran);
}

// A leaf's pre-accumulate hook sees its .grad as it was, before the backward's gradient is
// added; the post-accumulate hook sees the sum. Neither runs for a leaf the backward skips.
TEST(Autograd, PreAccumulateHookSeesTheGradientBeforeTheAddition) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3}, {1});
  std::vector<std::vector<float>> seen;
  auto pre = a.register_pre_accumulate_grad_hook([&](const Tensor& t) {
    seen.push_back(t.grad().defined() ? t.grad().to_vector() : std::vector<float>{});
    if (t.grad().defined()) t.grad().zero_();  // may rewrite what is already there
  });
  auto post = a.register_post_accumulate_grad_hook([&](const Tensor& t) { seen.push_back(t.grad().to_vector()); });
  sum(a * 2.0).backward();
  sum(a * 3.0).backward();
  sum(b * 1.0).backward();  // a is not reached
  EXPECT_EQ(seen, (std::vector<std::vector<float>>{{}, {2, 2}, {2, 2}, {3, 3}}));
  EXPECT_THROW((void)(a * 2.0).register_pre_accumulate_grad_hook([](const Tensor&) {}), AutogradError);
}

// An embedding hands its table's gradient to the engine as rows (add_rows_to_gradient): added
// in place into a tied head's dense gradient, onto zeros alone, into an existing .grad, and
// through grad()'s capture, equal to the dense one-hot path's (the reference) in f32; in
// bf16 rounded once.
namespace {
std::vector<float> tied_table_gradient(DType dt, bool reference, bool capture, bool with_head) {
  std::optional<kernels::ReferenceGuard> ref;
  if (reference) ref.emplace();
  Tensor w = Tensor::from_vector({0.5f, -1, 2, 0.25f, 1, -0.5f, 3, 1.5f, -2, 0.75f, 1.25f, -0.25f, 2.5f, -1.5f}, {7, 2})
                 .to(dt)
                 .requires_grad_();
  const Tensor x = Tensor::from_vector({1, 2, -1, 0.5f, 3, -2}, {3, 2}).to(dt);
  const Tensor ids = Tensor::from_ints({2, 5, 2, 0, 2}, {5});
  const Tensor c = Tensor::from_vector({1, -2, 0.5f, 3, -1, 2, 0.25f, 1.5f, -0.75f, 4}, {5, 2}).to(dt);
  Tensor loss = sum(mul(embedding(w, ids), c));
  if (with_head) loss = add(loss, sum(linear(x, w)));  // the head's gradient is dense
  if (capture) return autograd::grad({loss}, {Tensor()}, {w})[0].to(DType::f32).to_vector();
  loss.backward();
  sum(mul(embedding(w, Tensor::from_ints({6}, {1})), Tensor::from_vector({2, 2}, {1, 2}).to(dt))).backward();  // into .grad
  return w.grad().to(DType::f32).to_vector();
}
}  // namespace

TEST(Autograd, EmbeddingRowsMeetTheTableGradientWhereItIsSummed) {
  for (bool capture : {false, true})
    for (bool head : {false, true}) {
      SCOPED_TRACE(std::string(capture ? "grad()" : "backward()") + (head ? ", tied head" : ", embedding alone"));
      const auto want = tied_table_gradient(DType::f32, true, capture, head);
      EXPECT_EQ(tied_table_gradient(DType::f32, false, capture, head), want);  // the same sums, the same order
      const auto low = tied_table_gradient(DType::bf16, false, capture, head);
      ASSERT_EQ(low.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(low[i], want[i], 1e-2 * (1 + std::abs(want[i]))) << i;
    }
}

TEST(Autograd, RowsOutsideABackwardAreAnError) {
  EXPECT_THROW(autograd::add_rows_to_gradient(0, Tensor::from_ints({0}, {1}), Tensor::zeros({1, 2})), AutogradError);
}

// A weight released after the forward and given back before the backward (ZeRO-3's release
// and gather): matmul and linear keep its handle, so the released storage is freed, not held
// by the graph, and the backward reads the weight given back.
TEST(Autograd, ProductsKeepAWeightsHandleNotItsReleasedStorage) {
  for (int kind = 0; kind < 3; ++kind) {  // matmul 2-D, matmul with a batch folded, linear
    Tensor w = Tensor::full({64, 64}, 1.0f).requires_grad_();
    Tensor x = Tensor::full(kind == 1 ? Shape{2, 3, 64} : Shape{6, 64}, 1.0f).requires_grad_();
    Tensor y = kind == 2 ? linear(x, w) : matmul(x, w);
    const size_t held = host_tier().bytes_in_use();
    {
      NoGradGuard ng;
      w.set_data(Tensor::empty({0}));  // released
    }
    EXPECT_EQ(held - host_tier().bytes_in_use(), size_t(64 * 64 * 4)) << "kind " << kind;
    {
      NoGradGuard ng;
      w.set_data(Tensor::full({64, 64}, 2.0f));  // gathered again (other values, to see which is read)
    }
    sum(y).backward();
    EXPECT_FLOAT_EQ(x.grad().to_vector()[0], 64 * 2.0f) << "kind " << kind;  // dx = dy W^T (or W): the weight given back
    EXPECT_FLOAT_EQ(w.grad().to_vector()[0], 6.0f) << "kind " << kind;       // dW = x^T dy: six rows of ones
  }
}
