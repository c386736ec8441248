// Mixed precision: the scaler's rule, golden bounds for bf16 and fp16, fp32 masters in
// training and checkpoints, non-finite handling, and oneDNN's AMX kernels for bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <dnnl.hpp>
#include <filesystem>

#include "booster/booster.h"
#include "booster/checkpoint/reader.h"
#include "booster/checkpoint/tensor_store.h"
#include "booster/mixed_precision.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/raw.h"
#include "nn/pretrained.h"
#include "nn/safetensors.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace booster;

namespace {
const std::string kGolden = BOOSTER_SHARED_DIR "/golden/vit_tiny";
}

TEST(GradScaler, ColossalUpdateRuleStepByStep) {
  GradScalerOptions o;
  o.initial_scale = 1024, o.growth_interval = 3, o.hysteresis = 2, o.min_scale = 256;
  DynamicGradScaler s(o);
  s.update(true);  // first overflow: within hysteresis, no back-off
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // second: back off
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // the hysteresis counter was not reset: backs off again
  EXPECT_EQ(s.scale(), 256);
  s.update(true);  // min_scale holds
  EXPECT_EQ(s.scale(), 256);
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 256);
  s.update(false);  // growth_interval clean steps: grow, and reset hysteresis
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.hysteresis_step(), 0);
  s.update(true);  // hysteresis again needs two overflows
  EXPECT_EQ(s.scale(), 512);
  s.update(false);  // an overflow resets growth progress
  s.update(false);
  EXPECT_EQ(s.scale(), 512);
  DynamicGradScaler d;
  EXPECT_EQ(d.scale(), 65536.0);
  EXPECT_EQ(d.options().max_scale, 4294967296.0);
  EXPECT_EQ(d.options().growth_interval, 1000);
}

class MixedPrecisionGolden : public ::testing::TestWithParam<std::tuple<std::string, double, double>> {};

// bf16: logits within 0.05 of fp32's reference, loss within 2 %; fp16: 0.01 and 0.5 %.
TEST_P(MixedPrecisionGolden, LogitsAndLossWithinBounds) {
  const auto [precision, logit_tol, loss_rel] = GetParam();
  auto model = nn::vit_from_pretrained(kGolden);
  model->eval();
  auto opt = std::make_shared<optim::AdamW>(model->named_parameters());
  Booster booster(nullptr, precision);
  auto b = booster.boost(model, opt);
  EXPECT_EQ(model->get_tensor("vit.encoder.layer.0.intermediate.dense.weight").dtype(),
            precision == "bf16" ? DType::bf16 : DType::f16);
  auto input = nn::load_safetensors(kGolden + "/input.safetensors");
  auto expected = nn::load_safetensors(kGolden + "/expected.safetensors");
  auto out = (*b.model)(input.at("pixel_values"), input.at("labels"));  // f32 inputs are cast on the way in
  EXPECT_EQ(out.loss.dtype(), DType::f32);
  auto got = out.logits.to_vector(), want = expected.at("logits").to_vector();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  const double loss_ref = expected.at("loss").to_vector()[0], loss = out.loss.item();
  std::printf("  %s: logits worst |diff| %.4f (bound %.2f), loss %.5f vs %.5f (%.3f %%, bound %.1f %%)\n",
              precision.c_str(), worst, logit_tol, loss, loss_ref, 100 * std::abs(loss - loss_ref) / loss_ref,
              100 * loss_rel);
  EXPECT_LE(worst, logit_tol);
  EXPECT_LE(std::abs(loss - loss_ref), loss_rel * loss_ref);
}

INSTANTIATE_TEST_SUITE_P(Precisions, MixedPrecisionGolden,
                         ::testing::Values(std::tuple{std::string("bf16"), 0.05, 0.02},
                                           std::tuple{std::string("fp16"), 0.01, 0.005}),
                         [](const auto& info) { return std::get<0>(info.param); });

TEST(MixedPrecision, MastersKeepFullPrecisionAndCheckpointsHoldThem) {
  auto model = nn::vit_from_pretrained(kGolden);
  auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{1e-4});
  Booster booster(nullptr, "bf16");
  auto b = booster.boost(model, opt);
  auto input = nn::load_safetensors(kGolden + "/input.safetensors");
  const float before = nn::load_safetensors(kGolden + "/model.safetensors").at("vit.layernorm.bias").to_vector()[0];
  for (int i = 0; i < 3; ++i) {
    b.optimizer->zero_grad();
    booster.backward((*b.model)(input.at("pixel_values"), input.at("labels")).loss, *b.optimizer);
    b.optimizer->step();
  }
  Tensor master = b.optimizer->find<MixedPrecisionOptimizer>()->masters().master("vit.layernorm.bias");
  ASSERT_TRUE(master.defined());
  EXPECT_EQ(master.dtype(), DType::f32);
  // Updates of ~1e-4 accumulate in the master although bf16 cannot hold them.
  EXPECT_NE(master.to_vector()[0], before);
  EXPECT_EQ(model->get_tensor("vit.layernorm.bias").to_vector()[0], from_bf16(to_bf16(master.to_vector()[0])));
  const auto dir = std::filesystem::temp_directory_path() / ("booster_mp_" + std::to_string(::getpid()));
  booster.save_model(*b.model, (dir / "m.ckpt").string());
  booster.save_optimizer(*b.optimizer, (dir / "o.ckpt").string());
  auto saved = ckpt::load_tensors((dir / "m.ckpt").string(), "model");
  for (auto& [n, t] : saved.tensors)
    if (n == "vit.layernorm.bias") {
      EXPECT_EQ(t.dtype(), DType::f32);
      EXPECT_EQ(t.to_vector(), master.to_vector());
    }
  {  // bf16 records no loss scale it never used; the layout records the precision
    ckpt::CheckpointReader r((dir / "o.ckpt").string(), "optimizer");
    EXPECT_EQ(r.index().optimizer().extra().count("loss_scale"), 0u);
    EXPECT_EQ(r.index().layout().precision(), "bf16");
  }
  // A fresh bf16 run loads the masters and the scaler state.
  auto model2 = nn::vit_from_pretrained(kGolden);
  auto opt2 = std::make_shared<optim::SGD>(model2->named_parameters(), optim::SGDOptions{1e-4});
  auto b2 = booster.boost(model2, opt2);
  booster.load_model(*b2.model, (dir / "m.ckpt").string());
  booster.load_optimizer(*b2.optimizer, (dir / "o.ckpt").string());
  EXPECT_EQ(b2.optimizer->find<MixedPrecisionOptimizer>()->masters().master("vit.layernorm.bias").to_vector(),
            master.to_vector());
  // The model's checkpoint and the optimizer read the same master: one owner.
  EXPECT_TRUE(b2.model->find<MixedPrecisionModel>()->masters().master("vit.layernorm.bias").is_same(
      b2.optimizer->find<MixedPrecisionOptimizer>()->masters().master("vit.layernorm.bias")));
}

TEST(MixedPrecision, NonFiniteUnderBf16IsSkippedOrRaised) {
  for (bool skip : {true, false}) {
    auto model = nn::vit_from_pretrained(kGolden);
    auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1});
    BoostedObjects o{std::make_shared<ModelWrapper>(model), std::make_shared<OptimizerLeaf>(opt), {}, nullptr, nullptr};
    MixedPrecisionOptions mp;
    mp.skip_nonfinite = skip;
    apply_mixed_precision(o, mp);
    auto input = nn::load_safetensors(kGolden + "/input.safetensors");
    BoostedModel<nn::ViTForImageClassification> wrapper(o.model);
    auto masters = [&]() -> const MasterParams& { return o.optimizer->find<MixedPrecisionOptimizer>()->masters(); };
    o.optimizer->backward(wrapper(input.at("pixel_values"), input.at("labels")).loss);
    Tensor g = model->get_tensor("classifier.bias").grad();
    g.fill_(NAN);
    const auto before = masters().master("classifier.weight").to_vector();
    if (skip) {
      o.optimizer->step();
      EXPECT_TRUE(static_cast<MixedPrecisionOptimizer&>(*o.optimizer).last_step_skipped());
      EXPECT_EQ(masters().master("classifier.weight").to_vector(), before);
    } else {
      try {
        o.optimizer->step();
        FAIL();
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("bf16 step 1"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(MixedPrecision, Bf16MatmulUsesAmxWhereTheCpuHasIt) {
  const auto isa = dnnl::get_effective_cpu_isa();
  const std::string impl = kernels::matmul_implementation(DType::bf16, 3152, 768, 768);
  std::printf("  oneDNN bf16 matmul implementation: '%s'\n", impl.c_str());
  if (!kernels::avx512::cpu_amx_ok())
    GTEST_SKIP() << "this CPU has no AMX (oneDNN ISA " << int(isa) << "); bf16 computes in f32 on bf16 storage";
  EXPECT_NE(impl.find("amx"), std::string::npos) << impl;
}
