// The fused head and loss: linear_cross_entropy gives linear + cross_entropy's loss and
// gradients over blocks of rows (fast and reference paths, f32 and bf16, ignored targets,
// a last block shorter than the others), its gradients agree with finite differences, bad
// targets are named, and GPT-2 / LLaMA with fused_linear_cross_entropy return the same loss
// and gradients from their named forward as from their logits.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/kernels/dispatch.h"
#include "core/tensor/random.h"
#include "nn/gpt2.h"
#include "nn/linear_cross_entropy.h"
#include "nn/llama.h"
#include "nn/pipeline.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;
using testkit::error_of;
using testkit::max_abs_diff;

namespace {

struct Case {
  Tensor hidden, weight, targets;
};

// hidden [n, e], weight [v, e] (leaves of dtype dt), targets with every seventh ignored.
Case make_case(int64_t n, int64_t e, int64_t v, DType dt, uint64_t seed) {
  Generator g(seed);
  Tensor h = Tensor::empty({n, e}), w = Tensor::empty({v, e});
  g.normal_(h, 0.0, 1.0), g.normal_(w, 0.0, 0.5);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = i % 7 == 3 ? -100 : (i * 31 + int64_t(seed)) % v;
  Case c{h.to(dt), w.to(dt), Tensor::from_ints(y, {n})};
  c.hidden.requires_grad_(true), c.weight.requires_grad_(true);
  return c;
}

// Loss and gradients of the unfused path (linear, then cross_entropy) and of the fused one.
struct Result {
  double loss;
  Tensor dh, dw;
};
Result run(const Case& c, bool fused, int64_t block_rows) {
  Tensor h = c.hidden.detach().clone(), w = c.weight.detach().clone();
  h.requires_grad_(true), w.requires_grad_(true);
  Tensor loss = fused ? linear_cross_entropy(h, w, c.targets, {}, {.block_rows = block_rows})
                      : cross_entropy(linear(h, w), c.targets);
  loss.backward();
  return {loss.item(), h.grad().to(DType::f32), w.grad().to(DType::f32)};
}

void expect_matches_unfused(DType dt, bool reference, double tol) {
  std::optional<kernels::ReferenceGuard> ref;
  if (reference) ref.emplace();
  const Case c = make_case(150, 24, 77, dt, 5);
  const Result want = run(c, false, 0);
  for (int64_t block : {0, 64, 150, 1}) {  // one block, three (the last of 22 rows), 150 of one row
    SCOPED_TRACE("block_rows " + std::to_string(block));
    const Result got = run(c, true, block);
    EXPECT_NEAR(got.loss, want.loss, tol * std::abs(want.loss));
    const double scale_h = max_abs_diff(want.dh, Tensor::zeros(want.dh.shape()));
    const double scale_w = max_abs_diff(want.dw, Tensor::zeros(want.dw.shape()));
    EXPECT_LE(max_abs_diff(got.dh, want.dh), tol * scale_h);
    EXPECT_LE(max_abs_diff(got.dw, want.dw), tol * scale_w);
  }
}

}  // namespace

TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyF32) { expect_matches_unfused(DType::f32, false, 2e-5); }
TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyReference) { expect_matches_unfused(DType::f32, true, 2e-5); }
// bf16: each block's weight gradient is rounded once before the f32 sum over blocks.
TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyBf16) { expect_matches_unfused(DType::bf16, false, 2e-2); }

TEST(LinearCrossEntropy, GradientsAgreeWithFiniteDifferences) {
  const Case c = make_case(9, 5, 11, DType::f32, 2);
  const Result r = run(c, true, 4);
  auto loss_at = [&](const Tensor& h, const Tensor& w) {
    NoGradGuard ng;
    return linear_cross_entropy(h, w, c.targets, {}, {.block_rows = 4}).item();
  };
  const double eps = 1e-2;
  for (int which = 0; which < 2; ++which) {
    Tensor base = (which == 0 ? c.hidden : c.weight).detach().clone();
    const Tensor& analytic = which == 0 ? r.dh : r.dw;
    for (int64_t i = 0; i < base.numel(); i += 3) {
      float* p = base.data<float>() + i;
      const float keep = *p;
      *p = keep + float(eps);
      const double up = which == 0 ? loss_at(base, c.weight.detach()) : loss_at(c.hidden.detach(), base);
      *p = keep - float(eps);
      const double down = which == 0 ? loss_at(base, c.weight.detach()) : loss_at(c.hidden.detach(), base);
      *p = keep;
      EXPECT_NEAR(analytic.data<float>()[i], (up - down) / (2 * eps), 2e-3) << (which == 0 ? "hidden " : "weight ") << i;
    }
  }
}

TEST(LinearCrossEntropy, FrozenWeightGetsNoGradientAndSkipsItsProduct) {
  Case c = make_case(20, 8, 13, DType::f32, 3);
  c.weight.requires_grad_(false);
  Tensor loss = linear_cross_entropy(c.hidden, c.weight, c.targets);
  loss.backward();
  EXPECT_TRUE(c.hidden.grad().defined());
  EXPECT_FALSE(c.weight.grad().defined());
}

TEST(LinearCrossEntropy, BadTargetsAndShapesAreNamed) {
  const Case c = make_case(6, 4, 5, DType::f32, 1);
  EXPECT_NE(error_of([&] { linear_cross_entropy(c.hidden, c.weight, Tensor::from_ints({0, 1, 2, 9, 0, 1}, {6})); })
                .find("target[3] = 9 is not a token id in [0, 5)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_cross_entropy(c.hidden, c.weight, Tensor::from_ints({0, 1}, {2})); }).find("one target a row"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_cross_entropy(c.hidden, Tensor::zeros({5, 3}), c.targets); }).find("does not fit weight"),
            std::string::npos);
}

namespace {

// A causal LM's named forward with and without fused_linear_cross_entropy: the same loss and
// parameter gradients; evaluation (no gradients) keeps returning logits.
template <typename Model>
void expect_fused_forward_matches(std::shared_ptr<Model> model, int64_t vocab) {
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < 2 * 9; ++i) ids.push_back((i * 5 + 1) % vocab), labels.push_back(i % 4 == 1 ? -100 : (i * 3 + 2) % vocab);
  const TensorMap batch{{"input_ids", Tensor::from_ints(ids, {2, 9})}, {"labels", Tensor::from_ints(labels, {2, 9})}};
  auto grads_of = [&](bool fused) {
    model->fused_linear_cross_entropy = fused;
    model->zero_grad();
    const TensorMap out = forward_named(*model, batch);
    EXPECT_EQ(out.count("logits"), fused ? 0u : 1u);
    Tensor loss = fused ? out.at("loss") : model->token_loss(out.at("logits"), batch.at("labels"));
    loss.backward();
    std::vector<Tensor> g{loss.detach()};
    for (auto& [n, p] : model->named_parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads_of(false), fused = grads_of(true);
  ASSERT_EQ(plain.size(), fused.size());
  EXPECT_NEAR(fused[0].item(), plain[0].item(), 1e-5 * std::abs(plain[0].item()));
  for (size_t i = 1; i < plain.size(); ++i) EXPECT_LE(max_abs_diff(fused[i], plain[i]), 1e-5) << i;
  NoGradGuard ng;
  EXPECT_EQ(forward_named(*model, batch).count("logits"), 1u);  // no gradients: the logits
}

}  // namespace

TEST(LinearCrossEntropy, GPT2TiedHeadFusedForwardMatchesLogits) {
  manual_seed(3);
  auto m = std::make_shared<GPT2LMHeadModel>(GPT2Config::preset("gpt2-tiny"));
  expect_fused_forward_matches(m, m->vocab_size());
}

TEST(LinearCrossEntropy, LlamaOwnHeadFusedForwardMatchesLogits) {
  manual_seed(4);
  LlamaConfig c = LlamaConfig::preset("llama-tiny");
  c.tie_word_embeddings = false;
  auto m = std::make_shared<LlamaForCausalLM>(c);
  expect_fused_forward_matches(m, m->vocab_size());
}
