// fp16 loss scaling on two ranks: a gradient forced to inf on one rank skips exactly that
// step on both ranks, the scale halves after `hysteresis` overflows and grows back after
// `growth_interval` clean steps, asserted step by step.
#include <gtest/gtest.h>

#include <cmath>

#include "booster/booster.h"
#include "booster/mixed_precision.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "tests/support/fixtures.h"

using namespace booster;

TEST(Fp16Overflow, ScriptedInfOnOneRankSkipsOnAllRanks) {
  const nn::ViTConfig c = testkit::tiny_vit();
  manual_seed(5);
  auto model = std::make_shared<nn::ViTForImageClassification>(c);
  auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.01});
  BoostedObjects o{std::make_shared<ModelWrapper>(model), std::make_shared<OptimizerLeaf>(opt), {}, nullptr, nullptr};
  MixedPrecisionOptions mp;
  mp.precision = "fp16";
  mp.scaler.initial_scale = 1024, mp.scaler.growth_interval = 3, mp.scaler.hysteresis = 2;
  apply_mixed_precision(o, mp);
  BoostedModel<nn::ViTForImageClassification> wrapper(o.model);
  auto& amp = static_cast<MixedPrecisionOptimizer&>(*o.optimizer);
  Tensor x = Tensor::ones({2, 3, 8, 8});
  Tensor y = Tensor::from_ints({0, 1}, {2});
  const int last = dist::world_size() - 1;
  // step: 1 2 3 4 5 6 7 8 9
  const std::vector<bool> poison{false, true, true, false, false, false, true, false, false};
  const std::vector<double> scale_after{1024, 1024, 512, 512, 512, 1024, 1024, 1024, 1024};
  for (size_t s = 0; s < poison.size(); ++s) {
    o.optimizer->zero_grad();
    o.optimizer->backward(wrapper(x, y).loss);
    if (poison[s] && dist::world_rank() == last) {
      Tensor g = model->get_tensor("classifier.weight").grad();
      g.fill_(INFINITY);
    }
    const auto before = amp.masters().master("vit.layernorm.weight").to_vector();
    o.optimizer->step();
    const bool skipped = amp.last_step_skipped();
    EXPECT_EQ(skipped, bool(poison[s])) << "step " << s + 1 << " on rank " << dist::world_rank();
    EXPECT_EQ(amp.masters().master("vit.layernorm.weight").to_vector() == before, bool(poison[s])) << "step " << s + 1;
    EXPECT_EQ(amp.loss_scale(), scale_after[s]) << "step " << s + 1;
    // Every rank agrees on every step.
    EXPECT_EQ(dist::all_reduce_scalar(skipped ? 1 : 0, dist::ReduceOp::sum), skipped ? dist::world_size() : 0);
  }
  EXPECT_EQ(amp.skipped_steps(), 3);
}
