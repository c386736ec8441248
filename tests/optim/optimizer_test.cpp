// Optimizer updates against hand-computed values, groups, clipping, state round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/kernels/ops.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/sgd.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::optim;

namespace {
Tensor param(std::vector<float> v) { return Tensor::from_vector(v, {int64_t(v.size())}).requires_grad_(); }
void set_grad(Tensor& p, std::vector<float> g) { p.set_grad(Tensor::from_vector(g, p.shape())); }
}  // namespace

TEST(Optimizer, SgdNesterovByHand) {
  Tensor w = param({1.0f});
  SGD opt(NamedParams{{"w", w}}, SGDOptions{0.1, 0.9, 0.0, 0.01, true});
  // step 1: d = g + wd w = 0.5 + 0.01 = 0.51; buf = 0.51; d = 0.51 + 0.9 * 0.51; w = 1 - 0.1 d
  set_grad(w, {0.5f});
  opt.step();
  const double d1 = 0.51 + 0.9 * 0.51, w1 = 1 - 0.1 * d1;
  EXPECT_NEAR(w.item(), w1, 1e-6);
  // step 2: d = 0.5 + 0.01 w1; buf = 0.9 * 0.51 + d; d = d + 0.9 buf
  opt.step();
  const double d = 0.5 + 0.01 * w1, buf = 0.9 * 0.51 + d;
  EXPECT_NEAR(w.item(), w1 - 0.1 * (d + 0.9 * buf), 1e-6);
}

TEST(Optimizer, AdamWByHand) {
  Tensor w = param({2.0f});
  AdamOptions o;
  o.lr = 0.1, o.weight_decay = 0.5;
  AdamW opt(NamedParams{{"w", w}}, o);
  set_grad(w, {0.3f});
  opt.step();
  // m = 0.03, v = 0.00009, bc1 = 0.1, bc2 = 0.001: step = lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) = 1 * 0.03/0.3 * ... = lr * 1
  const double m = 0.1 * 0.3, v = 0.001 * 0.09;
  const double expect = 2.0 * (1 - 0.1 * 0.5) - 0.1 / 0.1 * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
  EXPECT_NEAR(w.item(), expect, 1e-6);
}

TEST(Optimizer, AdamL2VersusDecoupled) {
  Tensor a = param({1.0f}), b = param({1.0f});
  AdamOptions o;
  o.lr = 0.01, o.weight_decay = 0.1;
  Adam adam(NamedParams{{"a", a}}, o);
  HybridAdam hybrid(NamedParams{{"b", b}}, o, /*adamw_mode=*/false);  // CPUAdam with adamw_mode off == Adam
  set_grad(a, {0.2f});
  set_grad(b, {0.2f});
  adam.step();
  hybrid.step();
  EXPECT_EQ(a.item(), b.item());
  EXPECT_TRUE(HybridAdam(NamedParams{{"b", b}}).adamw_mode());
}

TEST(Optimizer, LambTrustRatio) {
  Tensor w = param({3.0f, 4.0f});  // |w| = 5
  LambOptions o;
  o.lr = 0.1;
  Lamb opt(NamedParams{{"w", w}}, o);
  set_grad(w, {1.0f, -1.0f});
  opt.step();
  // m = 0.1 g, v = 0.001 g^2 -> u = m / (sqrt(v) + eps) = sign(g) * 0.1 / (0.0316228 + 1e-6)
  const double u = 0.1 / (std::sqrt(0.001) + 1e-6), un = u * std::sqrt(2.0), trust = 5.0 / un;
  EXPECT_NEAR(w.to_vector()[0], 3.0 - 0.1 * trust * u, 1e-5);
  EXPECT_NEAR(w.to_vector()[1], 4.0 + 0.1 * trust * u, 1e-5);
}

// exclude_from_layer_adaptation: the no-decay group (here a bias) takes trust 1, the weights
// keep theirs; without it the bias takes |b| / |u| like any tensor.
TEST(Optimizer, LambExcludesBiasesAndNormsFromLayerAdaptation) {
  for (bool exclude : {true, false}) {
    Tensor w = Tensor::from_vector({3.0f, 4.0f, 0.0f, 0.0f}, {2, 2}).requires_grad_();  // |w| = 5
    Tensor b = param({0.5f, 0.5f});
    LambOptions o;
    o.lr = 0.1, o.weight_decay = 0.0;
    auto groups = lamb_param_groups({{"fc.weight", w}, {"fc.bias", b}}, 0.01, exclude);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[1].options.count("adam"), exclude ? 1u : 0u);
    Lamb opt(groups, o);
    set_grad(w, {1.0f, -1.0f, 1.0f, -1.0f});
    set_grad(b, {1.0f, -1.0f});
    opt.step();
    const double u = 0.1 / (std::sqrt(0.001) + 1e-6);  // |u_i| of the first step
    // the weights: u + wd w with wd 0.01, trust |w| / |u + wd w|
    const double w_trust = 5.0 / std::sqrt(std::pow(u + 0.01 * 3, 2) + std::pow(u - 0.01 * 4, 2) + 2 * u * u);
    EXPECT_NEAR(w.to_vector()[2], -0.1 * w_trust * u, 1e-5) << exclude;
    const double b_trust = exclude ? 1.0 : std::sqrt(0.5) / (u * std::sqrt(2.0));
    EXPECT_NEAR(b.to_vector()[0], 0.5 - 0.1 * b_trust * u, 1e-5) << exclude;
    EXPECT_NEAR(b.to_vector()[1], 0.5 + 0.1 * b_trust * u, 1e-5) << exclude;
  }
}

TEST(Optimizer, GroupsAndErrors) {
  Tensor w = Tensor::ones({2, 2}).requires_grad_(), b = param({0, 0});
  auto groups = param_groups_no_decay({{"fc.weight", w}, {"fc.bias", b}}, 0.05);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params[0].first, "fc.weight");
  EXPECT_EQ(groups[1].options.at("weight_decay"), 0.0);
  AdamW opt(groups);
  EXPECT_EQ(opt.param_groups()[0].get("weight_decay"), 0.05);
  EXPECT_EQ(opt.param_groups()[1].lr(), 1e-3);
  ParamGroup bad{{{"x", param({1})}}, {{"momentum", 0.9}}};
  EXPECT_THROW(AdamW(std::vector<ParamGroup>{bad}), ValueError);
  EXPECT_THROW(AdamW(NamedParams{{"w", w}, {"w", w}}), ValueError);
  // A negative hyperparameter names itself, its value and its group.
  for (auto [key, make] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"lr", [&] { AdamW(NamedParams{{"w", w}}, AdamOptions{-0.001}); }},
           {"momentum", [&] { SGD(NamedParams{{"w", w}}, SGDOptions{0.1, -0.5}); }},
           {"weight_decay", [&] { AdamW(std::vector<ParamGroup>{{{{"w", w}}, {}}, {{{"b", b}}, {{"weight_decay", -1}}}}); }}}) {
    try {
      make();
      ADD_FAILURE() << "a negative " << key << " was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(key + " must be >= 0, got -"), std::string::npos) << e.what();
      if (key == "weight_decay") {
        EXPECT_NE(std::string(e.what()).find("(parameter group 1)"), std::string::npos) << e.what();
      }
    }
  }
  // A parameter without gradient is skipped; zero_grad clears.
  set_grad(b, {1, 1});
  opt.step();
  EXPECT_EQ(w.to_vector()[0], 1.f);
  EXPECT_NE(b.to_vector()[0], 0.f);
  opt.zero_grad();
  EXPECT_FALSE(b.grad().defined());
}

TEST(Optimizer, Bf16ParametersUpdateInF32) {
  Tensor w = Tensor::ones({4}, DType::bf16).requires_grad_();
  SGD opt(NamedParams{{"w", w}}, SGDOptions{0.5});
  w.set_grad(Tensor::full({4}, 1.0, DType::bf16));
  opt.step();
  EXPECT_EQ(w.dtype(), DType::bf16);
  EXPECT_EQ(w.to_vector()[0], 0.5f);
  // Whoever owns a master updates it through step_on, with the gradient divided inside.
  Tensor master = Tensor::ones({4});
  opt.step_on({{"w", master, Tensor::full({4}, 2e-3)}}, 2.0);
  EXPECT_NEAR(master.to_vector()[0], 1.0 - 0.5 * 1e-3, 1e-6);
  EXPECT_EQ(w.to_vector()[0], 0.5f);  // the parameter itself is untouched
  // A shard of a parameter updates by the parameter's name; its state takes the shard's shape.
  Tensor shard = Tensor::ones({2});
  opt.step_on({{"w", shard, Tensor::full({2}, 1.0)}});
  EXPECT_EQ(shard.to_vector(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_THROW(opt.step_on({{"v", shard, Tensor::full({2}, 1.0)}}), ValueError);
  EXPECT_THROW(opt.step_on({{"w", shard, Tensor::full({3}, 1.0)}}), ShapeError);
}

// The fused update (Adam family) reads a low-precision gradient as it goes and writes the
// compute copy in the same pass: bit for bit what widening the gradient, updating and
// converting the value after give. An optimizer without the fusion (SGD) refreshes the copy
// after its update. The size spans several threads' ranges (the f16 path's blocks too) and a
// remainder.
TEST(Optimizer, FusedUpdateEqualsStagedPasses) {
  const int64_t n = 3 * (1 << 14) + 37;
  auto filled = [&](uint64_t seed, DType dt) {
    Tensor t = Tensor::empty({n});
    Generator(seed).normal_(t);
    return t.to(dt);
  };
  for (DType gdt : {DType::f32, DType::bf16, DType::f16})
    for (DType wdt : {DType::bf16, DType::f16, DType::f32})
      for (int kind = 0; kind < 3; ++kind) {
        auto make = [&](Tensor w) -> std::unique_ptr<Optimizer> {
          NamedParams ps{{"w", w}};
          if (kind == 0) return std::make_unique<Adam>(ps, AdamOptions{1e-2, 0.9, 0.999, 1e-8, 0.1});
          if (kind == 1) return std::make_unique<AdamW>(ps);
          return std::make_unique<SGD>(ps, SGDOptions{0.1, 0.9});
        };
        Tensor fused_w = filled(1, wdt), staged_w = fused_w.clone();
        auto fused = make(fused_w), staged = make(staged_w);
        Tensor fused_master = filled(1, DType::f32), staged_master = fused_master.clone();
        for (int step = 0; step < 3; ++step) {
          Tensor g = filled(10 + uint64_t(step), gdt);
          fused->step_on({{"w", fused_master, g, fused_w}}, 2.0);
          staged->step_on({{"w", staged_master, g.to(DType::f32)}}, 2.0);
          staged_w.copy_(staged_master.to(wdt));
        }
        const std::string what = std::string(dtype_name(gdt)) + " gradient, " + dtype_name(wdt) + " copy, optimizer " +
                                 std::to_string(kind);
        EXPECT_EQ(fused_master.to_vector(), staged_master.to_vector()) << what;
        EXPECT_EQ(fused_w.to_vector(), staged_w.to_vector()) << what;
        EXPECT_NE(fused_w.to_vector(), filled(1, wdt).to_vector()) << what << ": the copy was not written";
        for (auto& [k, buf] : staged->state().at("w").buffers)
          EXPECT_EQ(fused->state().at("w").buffers.at(k).to_vector(), buf.to_vector()) << what << " " << k;
      }
  Adam opt(NamedParams{{"w", Tensor::ones({4})}});
  EXPECT_THROW(opt.step_on({{"w", Tensor::ones({4}), Tensor::ones({4}), Tensor::ones({3}, DType::bf16)}}), ShapeError);
}

TEST(Clip, GlobalNormAndValue) {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3, 0});
  set_grad(b, {4});
  EXPECT_DOUBLE_EQ(grad_norm({a, b}), 5.0);
  const double n = clip_grad_norm({a, b}, 1.0);
  EXPECT_DOUBLE_EQ(n, 5.0);
  EXPECT_NEAR(a.grad().to_vector()[0], 3.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(grad_norm({a, b}), 1.0, 1e-6);
  // The reducer seam: pretend another rank holds the same sum of squares.
  EXPECT_NEAR(grad_norm({a, b}, 2.0, {[](double local, bool) { return 2 * local; }, {}}), std::sqrt(2.0), 1e-6);
  // The counting seam: a parameter this rank does not count stays out of the norm but is
  // still clipped.
  const optim::NormScope without_b{{}, [&](const Tensor& p) { return !p.is_same(b); }};
  EXPECT_NEAR(grad_norm({a, b}, 2.0, without_b), 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(clip_grad_norm({a, b}, 0.3, 2.0, false, without_b), 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(b.grad().to_vector()[0], 4.0 / 5.0 * 0.5, 1e-5);  // scaled by 0.3 / 0.6 too
  set_grad(a, {3, 0});
  set_grad(b, {4});
  clip_grad_norm({a, b}, 1.0);
  EXPECT_NEAR(grad_norm({a, b}, INFINITY), 4.0 / 5.0, 1e-6);  // max |g| after clipping: b = 4/5
  set_grad(b, {NAN});
  EXPECT_TRUE(std::isnan(clip_grad_norm({a, b}, 1.0)));
  EXPECT_THROW(clip_grad_norm({a, b}, 1.0, 2.0, true), ValueError);
  set_grad(a, {-3, 0.5});
  clip_grad_value({a}, 1.0);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{-1, 0.5}));
}

TEST(Optimizer, StateRoundTripContinuesBitIdentical) {
  // Train a small ViT 3 steps, snapshot, then continue two copies: one uninterrupted, one
  // restored into fresh objects. Parameters must stay bit-identical.
  const nn::ViTConfig c = booster::testkit::tiny_vit();
  manual_seed(3);
  nn::ViTForImageClassification a(c);
  Tensor x = Tensor::empty({4, 3, 8, 8});
  Generator(5).normal_(x);
  Tensor y = Tensor::from_ints({0, 1, 2, 1}, {4});
  auto train = [&](nn::ViTForImageClassification& m, Optimizer& o, int steps) {
    for (int i = 0; i < steps; ++i) {
      o.zero_grad();
      m(x, y).loss.backward();
      o.step();
    }
  };
  AdamW oa(param_groups_no_decay(a.named_parameters(), 0.1));
  train(a, oa, 3);
  auto b = std::static_pointer_cast<nn::ViTForImageClassification>(a.clone());
  AdamW ob(param_groups_no_decay(b->named_parameters(), 0.1));
  ob.load_state_dict(oa.state_dict());
  train(a, oa, 2);
  train(*b, ob, 2);
  for (auto& [n, t] : a.named_parameters()) EXPECT_EQ(b->get_tensor(n).to_vector(), t.to_vector()) << n;
  auto bad = oa.state_dict();
  bad.type = "SGD";
  EXPECT_THROW(ob.load_state_dict(bad), ValueError);
}

// LARS as legacy Colossal-AI's: trust = eeta |w| / (|g| + wd |w| + eps) clamped to [0, 50],
// the decayed gradient clamped to +-10, momentum on it; biases and norms take trust 1 and no
// decay (lars_param_groups).
TEST(Optimizer, LarsTrustRatioAndExclusions) {
  Tensor w = Tensor::from_vector({3.0f, 4.0f, 0.0f, 0.0f}, {2, 2}).requires_grad_();  // |w| = 5
  Tensor b = param({1.0f, 1.0f});
  LarsOptions o;
  o.lr = 0.1, o.momentum = 0.9, o.eeta = 0.02, o.weight_decay = 0.1;
  auto groups = lars_param_groups({{"fc.weight", w}, {"fc.bias", b}}, o.weight_decay);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].options.at("lars_adaptation"), 0.0);
  Lars opt(groups, o);
  for (int step = 0; step < 2; ++step) {
    const auto w0 = w.to_vector(), b0 = b.to_vector();
    set_grad(w, {1.0f, 0.0f, 0.0f, 0.0f});  // |g| = 1
    set_grad(b, {20.0f, -0.5f});
    opt.step();
    const double wn = std::sqrt(double(w0[0]) * w0[0] + double(w0[1]) * w0[1]);
    const double trust = 0.02 * wn / (1.0 + 0.1 * wn);
    (void)trust;
    if (step == 0) {
      // buf = g + wd w; w -= lr trust buf
      EXPECT_NEAR(w.to_vector()[0], 3.0 - 0.1 * trust * (1.0 + 0.3), 1e-6);
      EXPECT_NEAR(w.to_vector()[1], 4.0 - 0.1 * trust * 0.4, 1e-6);
      // the bias: no decay, trust 1, its gradient clamped to 10
      EXPECT_NEAR(b.to_vector()[0], 1.0 - 0.1 * 10.0, 1e-6);
      EXPECT_NEAR(b.to_vector()[1], 1.0 + 0.1 * 0.5, 1e-6);
    } else {
      EXPECT_NEAR(b.to_vector()[0], b0[0] - 0.1 * (0.9 * 10.0 + 10.0), 1e-5);  // momentum on the clamped gradient
    }
  }
  Tensor z = param({0.0f, 0.0f});
  Lars zero_w(NamedParams{{"z", z}}, o);
  set_grad(z, {1.0f, 1.0f});
  zero_w.step();  // |w| = 0: trust 1
  EXPECT_NEAR(z.to_vector()[0], -0.1, 1e-7);
  EXPECT_THROW(Lars(NamedParams{{"z", z}}, LarsOptions{0.1, 0.0, 0.0}), ValueError);
}
