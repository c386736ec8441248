// LowLevelZeroPlugin specifics under mpirun: what each rank really holds (chunks of the
// masters and of the optimizer state, gradients freed by stage 2, kept by stage 1), mixed
// precision with loss scaling and the skip on every rank, overlap_allgather waited for by
// the next forward, training without masters, the disk tier, and bad arguments refused by
// name. Conformance (parity, no_sync, clipping, checkpoints) is in conformance_test.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/offload_store.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/sgd.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/registry.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::plugins;

namespace {

std::shared_ptr<nn::ViTForImageClassification> model(uint64_t seed = 42) {
  manual_seed(seed);
  return std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
}

std::shared_ptr<Plugin> zero_plugin(const std::string& extra) {
  return make_plugin(Config::from_string("[plugin]\nname = 'low_level_zero'\n" + extra, "zero.toml"));
}

std::pair<Tensor, Tensor> batch(int s) {
  Tensor x = Tensor::empty({2, 3, 8, 8});
  Generator(300 + uint64_t(s) * 17 + uint64_t(dist::world_rank())).normal_(x);
  return {x, Tensor::from_ints({int64_t(s % 3), int64_t((s + dist::world_rank()) % 3)}, {2})};
}

}  // namespace

TEST(LowLevelZero, EachRankHoldsItsChunksOnly) {
  for (int stage : {1, 2}) {
    auto m = model();
    Booster booster(zero_plugin("stage = " + std::to_string(stage) + "\nprecision = 'bf16'\n"));
    auto b = booster.boost(m, std::make_shared<optim::AdamW>(m->named_parameters()));
    auto& z = *b.optimizer->find<LowLevelZeroOptimizer>();
    const int n = dist::world_size(), r = dist::world_rank();
    int64_t mine = 0, total = 0;
    for (size_t i = 0; i < z.engine().layout().size(); ++i) {
      const auto& p = z.engine().layout().parts()[i];
      const auto& s = z.engine().shards().at(i);
      EXPECT_EQ(p.chunk, (p.numel + n - 1) / n) << p.name;
      EXPECT_EQ(p.lo, std::min(p.numel, p.chunk * r));
      EXPECT_EQ(p.param.dtype(), DType::bf16) << p.name;  // the working copy
      if (p.n > 0) {
        EXPECT_EQ(s.master.dtype(), DType::f32);
        EXPECT_EQ(s.master.numel(), p.n);
      }
      mine += p.n, total += p.numel;
    }
    EXPECT_EQ(int64_t(dist::all_reduce_scalar(double(mine), dist::ReduceOp::sum)), total);
    auto [x, y] = batch(0);
    booster.backward(b.model(x, y).loss, *b.optimizer);
    // Stage 2 keeps only the chunks of the gradients; stage 1 the full gradients.
    const Tensor w = m->get_tensor("vit.encoder.layer.0.intermediate.dense.weight");
    EXPECT_EQ(w.grad().defined(), stage == 1) << "stage " << stage;
    b.optimizer->step();
    // The optimizer state is chunk-shaped.
    for (auto& l : b.optimizer->state_layout()) {
      auto& st = b.optimizer->unwrap()->state().at(l.name);
      for (auto& [k, t] : st.buffers) EXPECT_EQ(t.shape(), l.local_shape) << l.name << "/" << k;
    }
    // Every rank ends with the same working parameters.
    for (auto& [name, p] : m->named_parameters()) {
      Tensor mx = p.detach().to(DType::f32), mn = scale(mx, -1.0);
      dist::all_reduce(mx, dist::ReduceOp::max);
      dist::all_reduce(mn, dist::ReduceOp::max);
      EXPECT_EQ(mx.to_vector(), scale(mn, -1.0).to_vector()) << name;
    }
  }
}

TEST(LowLevelZero, Fp16OverflowOnOneRankSkipsEverywhere) {
  auto m = model();
  Booster booster(zero_plugin("stage = 2\nprecision = 'fp16'\ninitial_scale = 1024\nhysteresis = 1\n"));
  auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.01}));
  auto& z = *b.optimizer->find<LowLevelZeroOptimizer>();
  auto [x, y] = batch(1);
  EXPECT_EQ(b.model(x, y).logits.dtype(), DType::f16);
  auto loss = b.model(x, y).loss;
  booster.backward(loss, *b.optimizer);
  const int last = dist::world_size() - 1;
  if (dist::world_rank() == last)  // poison this rank's chunk of one gradient
    for (size_t i = 0; i < z.engine().layout().parts().size(); ++i)
      if (Tensor g = z.engine().grads().chunk(i); g.defined() && g.numel() > 0) {
        g.fill_(INFINITY);
        break;
      }
  const auto before = m->get_tensor("classifier.weight").to_vector();
  b.optimizer->step();
  EXPECT_TRUE(z.scaling().last_step_skipped());
  EXPECT_EQ(z.scaling().loss_scale(), 512);
  EXPECT_EQ(m->get_tensor("classifier.weight").to_vector(), before);
  booster.backward(b.model(x, y).loss, *b.optimizer);
  b.optimizer->step();
  EXPECT_FALSE(z.scaling().last_step_skipped());
  EXPECT_NE(m->get_tensor("classifier.weight").to_vector(), before);
}

TEST(LowLevelZero, OverlappedAllGatherAndNoMastersTrainLikeTheDefault) {
  auto run = [](const std::string& extra) {
    auto m = model();
    Booster booster(zero_plugin("stage = 2\nprecision = 'fp32'\n" + extra));
    auto b = booster.boost(m, std::make_shared<optim::AdamW>(m->named_parameters()));
    std::vector<float> losses;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s);
      b.optimizer->zero_grad();
      Tensor loss = b.model(x, y).loss;  // waits for the previous step's gather
      losses.push_back(float(loss.item()));
      booster.backward(loss, *b.optimizer);
      b.optimizer->step();
    }
    return losses;
  };
  const auto base = run("");
  EXPECT_EQ(run("overlap_allgather = true\n"), base);
  const auto no_masters = run("master_weights = false\n");  // fp32 working params: the same updates
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(no_masters[i], base[i], 1e-6);
}

TEST(LowLevelZero, OffloadKeepsMastersAndStatesOnDisk) {
  auto m = model();
  const std::string dir = (testkit::temp_path("zero_offload") / std::to_string(dist::world_rank())).string();
  Booster booster(zero_plugin("stage = 2\nprecision = 'bf16'\ncpu_offload = true\noffload_dir = '" + dir + "'\n"));
  auto b = booster.boost(m, std::make_shared<optim::AdamW>(m->named_parameters()));
  auto& z = *b.optimizer->find<LowLevelZeroOptimizer>();
  ASSERT_NE(z.engine().shards().store(), nullptr);
  EXPECT_EQ(z.engine().shards().store()->path().rfind(dir, 0), 0u);
  for (int s = 0; s < 2; ++s) {
    auto [x, y] = batch(s);
    b.optimizer->zero_grad();
    booster.backward(b.model(x, y).loss, *b.optimizer);
    b.optimizer->step();
  }
  z.engine().shards().store()->flush();
  // Masters and both Adam states of every chunk live in the file; RAM keeps the step counts.
  int64_t elems = 0;
  for (auto& p : z.engine().layout().parts()) elems += p.n;
  EXPECT_GE(z.engine().shards().store()->disk_bytes(), size_t(elems) * 4 * 3);
  EXPECT_GE(disk_tier().bytes_in_use(), size_t(elems) * 4 * 3);
  for (auto& [name, st] : b.optimizer->unwrap()->state()) {
    EXPECT_TRUE(st.buffers.empty()) << name;
    EXPECT_EQ(st.step, 2) << name;
  }
  EXPECT_GT(z.engine().shards().store()->bytes_read(), 0u);
  // The state still reads back whole (gathered over the ranks).
  auto sd = b.optimizer->state_dict();
  EXPECT_EQ(sd.state.at("classifier.weight").buffers.at("exp_avg").shape(), (Shape{3, 16}));
}

TEST(LowLevelZero, MaxNormClipsEveryStepAsAnExplicitClip) {
  // The plugin's max_norm clips each step by the global norm over all partitions: the same
  // update as calling clip_grad_by_norm(max_norm) before each step.
  auto run = [](const std::string& extra, double explicit_clip) {
    auto m = model();
    Booster booster(zero_plugin("stage = 2\nprecision = 'fp32'\n" + extra));
    auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.5}));
    std::optional<double> norm;
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = batch(s);
      b.optimizer->zero_grad();
      booster.backward(b.model(x, y).loss, *b.optimizer);
      if (explicit_clip > 0) b.optimizer->clip_grad_by_norm(explicit_clip);
      b.optimizer->step();
      norm = b.optimizer->get_grad_norm();
    }
    return std::make_pair(m->get_tensor("classifier.weight").to_vector(), norm);
  };
  const auto [plugin_clipped, n1] = run("max_norm = 0.01\n", 0);
  const auto [explicit_clipped, n2] = run("", 0.01);
  const auto [unclipped, n3] = run("", 0);
  ASSERT_TRUE(n1.has_value());
  EXPECT_GT(*n1, 0.01);  // the test really clips
  EXPECT_NEAR(*n1, *n2, 1e-6 * *n2);
  for (size_t i = 0; i < plugin_clipped.size(); ++i) EXPECT_NEAR(plugin_clipped[i], explicit_clipped[i], 1e-6);
  EXPECT_NE(plugin_clipped, unclipped);
}

TEST(LowLevelZero, BadArgumentsAreNamed) {
  auto msg = [](const std::string& extra) { return testkit::error_of([&] { zero_plugin(extra); }); };
  EXPECT_NE(msg("stage = 3\n").find("stage must be 1 or 2, got 3"), std::string::npos) << msg("stage = 3\n");
  EXPECT_NE(msg("precision = 'fp8'\n").find("precision must be one of fp16, bf16, fp32, got 'fp8'"), std::string::npos);
  EXPECT_NE(msg("reduce_bucket_size_in_m = 0\n").find("reduce_bucket_size_in_m must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(msg("norm_type = 1.0\n").find("norm_type must be 2.0"), std::string::npos);
  EXPECT_NE(msg("stage = '2'\n").find("plugin.stage"), std::string::npos);
  EXPECT_NE(msg("offload = true\n").find("unknown key 'plugin.offload'"), std::string::npos);
  // Lamb's trust ratio over shards reads each chunk twice: with the states on disk refused
  // with the reason (in RAM it runs: tests/plugins/layerwise_shards_test.cpp).
  auto m = model();
  Booster booster(zero_plugin("stage = 1\ncpu_offload = true\n"));
  const std::string e = testkit::error_of([&] {
    booster.boost(m, std::make_shared<optim::Lamb>(m->named_parameters()));
  });
  EXPECT_NE(e.find("Lamb with offloaded optimizer states (cpu_offload, offload_optim_frac) is not supported"),
            std::string::npos) << e;
}
