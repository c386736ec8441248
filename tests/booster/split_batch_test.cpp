// Booster's split_batch: each thread runs its own share of the batch (nn::split_batch). The
// outputs and every gradient match the whole batch's, an input's gradient is joined from the
// shares', and what cannot run split (a module with hooks) is refused clearly.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "booster/booster.h"
#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/common/profiler.h"
#include "core/kernels/ops.h"
#include "nn/gpt2.h"
#include "nn/vit.h"
#include "tests/support/fixtures.h"

using namespace booster;

namespace {

std::shared_ptr<nn::ViTForImageClassification> model() {
  manual_seed(5);
  return std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
}

struct Step {
  Tensor logits, loss;
  std::string loss_node;
  std::map<std::string, Tensor> grads;
};

// 7 images and their labels: shares of 3 and 4 over 2 threads.
std::pair<Tensor, Tensor> seven_images() {
  Tensor x = Tensor::empty({7, 3, 8, 8});
  Generator(9).normal_(x);
  return {x, Tensor::from_vector({0, 1, 2, 0, 1, 2, 1}, {7}).to(DType::i64)};
}

// One forward and backward of 7 images (shares of 3 and 4) through a booster.
Step run(bool split) {
  omp_set_num_threads(2);
  auto m = model();
  Booster booster(nullptr, "", split);
  auto boosted = booster.boost(m);
  auto [x, y] = seven_images();
  auto out = boosted.model(x, y);
  Step s{out.logits, out.loss, out.loss.impl()->grad_fn ? out.loss.impl()->grad_fn->name() : "", {}};
  out.loss.backward();
  for (auto& [name, p] : m->named_parameters()) s.grads[name] = p.grad();
  return s;
}

}  // namespace

TEST(SplitBatch, ViTMatchesTheWholeBatch) {
  const Step whole = run(false), split = run(true);
  EXPECT_EQ(whole.loss_node, "cross_entropy");
  EXPECT_EQ(split.loss_node, "split_batch");  // it did run as shares
  EXPECT_LT(testkit::max_abs_diff(whole.logits, split.logits), 1e-5);
  EXPECT_LT(testkit::max_abs_diff(whole.loss, split.loss), 1e-6);
  ASSERT_EQ(whole.grads.size(), split.grads.size());
  for (auto& [name, g] : whole.grads) {
    ASSERT_TRUE(split.grads.at(name).defined()) << name;
    EXPECT_LT(testkit::max_abs_diff(g, split.grads.at(name)), 1e-5) << name;
  }
}

// The Trainer's path: execute_pipeline runs a model without a pipeline as one whole stage,
// and that stage runs as shares too (its outputs' rows joined), with the whole batch's
// logits and gradients.
TEST(SplitBatch, OneStageExecutePipelineRunsAsShares) {
  auto one_stage = [](bool split) {
    omp_set_num_threads(2);
    auto m = model();
    Booster booster(nullptr, "", split);
    auto boosted = booster.boost(m);
    auto [x, y] = seven_images();
    auto ce = on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); });
    Step s;
    auto r = booster.execute_pipeline(single_batch({{"pixel_values", x}, {"labels", y}}), boosted.model, ce, nullptr,
                                      true, true);
    s.logits = r.outputs.at("logits"), s.loss = r.loss;
    for (auto& [name, p] : m->named_parameters()) s.grads[name] = p.grad();
    return std::make_pair(s, m);
  };
  auto [whole, wm] = one_stage(false);
  auto [split, sm] = one_stage(true);
  EXPECT_EQ(whole.logits.size(0), 7);
  EXPECT_LT(testkit::max_abs_diff(whole.logits, split.logits), 1e-5);
  EXPECT_LT(testkit::max_abs_diff(whole.loss, split.loss), 1e-6);
  for (auto& [name, g] : whole.grads) EXPECT_LT(testkit::max_abs_diff(g, split.grads.at(name)), 1e-5) << name;
  // It did run as shares: a module hook is refused there, as in a split model call.
  auto handle = sm->classifier->register_forward_hook([](nn::Module&) {});
  Booster booster(nullptr, "", true);
  auto boosted = booster.boost(sm);
  const std::string err = testkit::error_of([&] {
    booster.execute_pipeline(single_batch({{"pixel_values", Tensor::zeros({4, 3, 8, 8})},
                                           {"labels", Tensor::zeros({4}, DType::i64)}}),
                             boosted.model, on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); }));
  });
  EXPECT_NE(err.find("module 'classifier' has hooks"), std::string::npos) << err;
}

// A language model's loss is a mean over the labels that count: with -100 labels piled in
// one share's rows, the shares' losses are combined by the labels each counted, not by rows,
// and equal the whole batch's token mean, gradients too. A share with no label counted (its
// own mean a NaN) is left out.
TEST(SplitBatch, CausalLMLossIsTheTokenMeanWhateverTheShares) {
  auto run_lm = [](bool split, const Tensor& labels) {
    omp_set_num_threads(2);
    manual_seed(3);
    auto m = std::make_shared<nn::GPT2LMHeadModel>(nn::GPT2Config::preset("gpt2-tiny"));
    Booster booster(nullptr, "", split);
    auto boosted = booster.boost(m);
    Tensor ids = Tensor::empty({5, 6}, DType::i64);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7) % 65;
    auto out = boosted.model(ids, labels);
    Step s{out.logits, out.loss, out.loss.impl()->grad_fn ? out.loss.impl()->grad_fn->name() : "", {}};
    EXPECT_EQ(out.loss_tokens, [&] {
      int64_t n = 0;
      for (int64_t r = 0; r < 5; ++r)
        for (int64_t t = 1; t < 6; ++t) n += labels.data<int64_t>()[r * 6 + t] != -100;
      return n;
    }());
    out.loss.backward();
    for (auto& [name, p] : m->named_parameters()) s.grads[name] = p.grad();
    return s;
  };
  for (int case_ = 0; case_ < 2; ++case_) {
    // Shares of rows 0-1 and 2-4; case 0: the first share keeps one label, case 1: none.
    Tensor labels = Tensor::empty({5, 6}, DType::i64);
    for (int64_t i = 0; i < labels.numel(); ++i) labels.data<int64_t>()[i] = (i * 5 + 1) % 65;
    for (int64_t i = 0; i < 12; ++i)
      if (case_ == 1 || i != 4) labels.data<int64_t>()[i] = -100;
    const Step whole = run_lm(false, labels), split = run_lm(true, labels);
    EXPECT_EQ(split.loss_node, "split_batch") << case_;
    EXPECT_TRUE(std::isfinite(split.loss.item())) << case_;
    EXPECT_LT(testkit::max_abs_diff(whole.loss, split.loss), 1e-6) << case_;
    EXPECT_LT(testkit::max_abs_diff(whole.logits, split.logits), 1e-5) << case_;
    for (auto& [name, g] : whole.grads) {
      if (!g.defined()) continue;
      ASSERT_TRUE(split.grads.at(name).defined()) << name;
      EXPECT_LT(testkit::max_abs_diff(g, split.grads.at(name)), 1e-5) << name << " case " << case_;
    }
  }
}

TEST(SplitBatch, InputGradientIsJoinedFromTheShares) {
  Tensor w = Tensor::empty({5, 4});
  Generator(2).normal_(w);
  w.requires_grad_();
  Tensor x = Tensor::empty({6, 4});
  Generator(3).normal_(x);
  x.requires_grad_();
  auto f = [&](const Tensor& xs) { return mean(linear(xs, w)); };
  Tensor whole = f(x);
  whole.backward();
  const Tensor dx = x.grad().clone(), dw = w.grad().clone();
  x.set_grad(Tensor()), w.set_grad(Tensor());
  auto outs = nn::split_batch(3, {x}, {w}, [&](int, const std::vector<Tensor>& a) {
    return nn::ShareOutput{{f(a[0])}, {nn::BatchMerge::mean}};
  });
  EXPECT_LT(testkit::max_abs_diff(outs[0], whole), 1e-6);
  outs[0].backward();
  EXPECT_LT(testkit::max_abs_diff(x.grad(), dx), 1e-6);
  EXPECT_LT(testkit::max_abs_diff(w.grad(), dw), 1e-6);
}

TEST(SplitBatch, ShareErrorsReachTheCaller) {
  Tensor x = Tensor::zeros({4, 2});
  EXPECT_EQ(testkit::error_of([&] {
              nn::split_batch(2, {x}, {}, [&](int s, const std::vector<Tensor>&) -> nn::ShareOutput {
                BOOSTER_THROW(ValueError, "share ", s, " failed");
              });
            }).rfind("share ", 0),
            0u);
  EXPECT_NE(testkit::error_of([&] { nn::split_batch(5, {x}, {}, nullptr); }).find("4 rows cannot make 5 shares"),
            std::string::npos);
}

TEST(SplitBatch, ModuleHooksAreRefused) {
  omp_set_num_threads(2);
  auto m = model();
  auto handle = m->classifier->register_forward_hook([](nn::Module&) {});
  Booster booster(nullptr, "", true);
  auto boosted = booster.boost(m);
  Tensor x = Tensor::zeros({4, 3, 8, 8});
  const std::string err = testkit::error_of([&] { boosted.model(x); });
  EXPECT_NE(err.find("module 'classifier' has hooks"), std::string::npos) << err;
  NoGradGuard no_grad;  // no history recorded: nothing to split, the hooks run as always
  EXPECT_EQ(boosted.model(x).logits.size(0), 4);
}

TEST(SplitBatch, SharesDrawDropoutFromTheirOwnGenerators) {
  Tensor x = Tensor::ones({8, 256});
  x.requires_grad_();
  auto masks = [&] {
    manual_seed(17);
    auto outs = nn::split_batch(2, {x}, {}, [&](int, const std::vector<Tensor>& a) {
      return nn::ShareOutput{{dropout(a[0], 0.5, true)}, {nn::BatchMerge::concat}};
    });
    return outs[0].to_vector();
  };
  const auto first = masks(), again = masks();
  EXPECT_EQ(first, again);  // the same seed, the same masks
  // Both shares' rows are alike, so one generator per share shows as different masks.
  EXPECT_FALSE(std::equal(first.begin(), first.begin() + 4 * 256, first.begin() + 4 * 256));
  int64_t kept = 0;
  for (float v : first) kept += v != 0;
  EXPECT_GT(kept, 800);
  EXPECT_LT(kept, 1250);
}

TEST(SplitBatch, ProfileCountsTheSharesOpsNotTheirNode) {
  omp_set_num_threads(2);
  auto m = model();
  Booster booster(nullptr, "", true);
  auto boosted = booster.boost(m);
  Tensor x = Tensor::zeros({4, 3, 8, 8});
  Profiler::reset();
  Profiler::enable();
  boosted.model(x, Tensor::zeros({4}, DType::i64)).loss.backward();
  Profiler::enable(false);
  bool linear_bwd = false;
  for (const auto& e : Profiler::entries()) {
    EXPECT_NE(e.name, "split_batch bwd");  // its time is its shares' ops', counted once
    linear_bwd = linear_bwd || (e.name == "linear bwd" && e.seconds > 0);
  }
  EXPECT_TRUE(linear_bwd);
  Profiler::reset();
}

TEST(SplitBatch, AGradientOutsideParamsAndInputsIsAnErrorNotLost) {
  Tensor w = Tensor::ones({3, 2});
  w.requires_grad_();
  Tensor stray = Tensor::ones({3});  // requires grad, but split_batch is not told of it
  stray.requires_grad_();
  Tensor x = Tensor::ones({4, 2});
  auto outs = nn::split_batch(2, {x}, {w}, [&](int, const std::vector<Tensor>& a) {
    return nn::ShareOutput{{mean(add(linear(a[0], w), stray))}, {nn::BatchMerge::mean}};
  });
  const std::string err = testkit::error_of([&] { outs[0].backward(); });
  EXPECT_NE(err.find("not among the inputs"), std::string::npos) << err;
}

TEST(SplitBatch, RetainGraphReachesTheShares) {
  Tensor w = Tensor::ones({3, 2});
  w.requires_grad_();
  Tensor x = Tensor::ones({4, 2});
  auto outs = nn::split_batch(2, {x}, {w}, [&](int, const std::vector<Tensor>& a) {
    return nn::ShareOutput{{mean(linear(a[0], w))}, {nn::BatchMerge::mean}};
  });
  autograd::backward({outs[0]}, {Tensor()}, /*retain_graph=*/true);
  const auto once = w.grad().to_vector();
  outs[0].backward();  // the shares' graphs were kept
  const auto twice = w.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}
