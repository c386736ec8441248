// HybridParallelPlugin specifics (the conformance suite covers training parity, no_sync,
// clipping and checkpoints across layouts): what the ViT policy does to the model, a custom
// policy sharding a user's own (non-ViT) model, mixed precision through tensor parallelism
// with the overflow skip on every rank, and arguments refused by name. Runs at np 2 and 4
// (tp 2, and tp 2 x dp 2).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <tuple>

#include "booster/booster.h"
#include "booster/mixed_precision.h"
#include "core/dist/collectives.h"
#include "core/common/profiler.h"
#include "core/dist/runtime.h"
#include "core/kernels/dispatch.h"
#include "nn/parallel/linear_1d.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "plugins/registry.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;

namespace {

std::shared_ptr<plugins::HybridParallelPlugin> hybrid(const std::string& extra, std::shared_ptr<shardformer::Policy> policy = nullptr) {
  auto o = plugins::HybridParallelOptions::from_config(
      Config::from_string("[plugin]\nname = 'hybrid_parallel'\ntp_size = 2\n" + extra, "hybrid.toml"));
  o.custom_policy_object = std::move(policy);
  return std::make_shared<plugins::HybridParallelPlugin>(o);
}

double max_rel_diff(const Tensor& got, const Tensor& want) {
  auto a = testkit::logical(got).to_vector(), b = testkit::logical(want).to_vector();
  double err = 0, scale = 1e-3;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return err / scale;
}

// A user's model that is not a ViT: an MLP block.
class MLPBlock : public nn::UnaryModule {
 public:
  MLPBlock() {
    fc1 = register_module<nn::UnaryModule>("fc1", std::make_shared<nn::Linear>(8, 16));
    act = register_module<nn::UnaryModule>("act", std::make_shared<nn::GELU>());
    fc2 = register_module<nn::UnaryModule>("fc2", std::make_shared<nn::Linear>(16, 8));
  }
  std::string type_name() const override { return "MLPBlock"; }
  Tensor forward(const Tensor& x) override { return fc2(act(fc1(x))); }
  nn::Slot<nn::UnaryModule> fc1, act, fc2;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<MLPBlock>(); }
};

// Its policy, as a user writes one: fc1 column-parallel, fc2 row-parallel.
class MLPPolicy : public shardformer::Policy {
 public:
  std::string name() const override { return "MLPPolicy"; }
  void config_sanity_check(const nn::Module&, const shardformer::ShardConfig&) const override {}
  std::map<std::string, shardformer::ModulePolicyDescription> module_policy(const nn::Module&,
                                                                         const shardformer::ShardConfig&) const override {
    auto col = [](const std::shared_ptr<nn::Module>& m, const shardformer::ShardConfig& c) {
      return nn::Linear1DCol::from_native_module(m, c.tp_group());
    };
    auto row = [](const std::shared_ptr<nn::Module>& m, const shardformer::ShardConfig& c) {
      return nn::Linear1DRow::from_native_module(m, c.tp_group());
    };
    return {{"MLPBlock", {{}, {{"fc1", col}, {"fc2", row}}}}};
  }
};

}  // namespace

TEST(HybridParallel, ViTPolicyShardsTheLayersAndKeepsTheNames) {
  auto c = testkit::tiny_vit(2);
  c.num_labels = 4;  // divides by tp: the classifier is column-parallel with its output gathered
  manual_seed(3);
  auto model = std::make_shared<nn::ViTForImageClassification>(c);
  std::vector<std::string> names;
  for (auto& [n, p] : model->named_parameters()) names.push_back(n);
  auto plugin = hybrid("precision = 'fp32'\n");
  Booster booster(plugin);
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1}));
  EXPECT_EQ(b.model->type_name(), "HybridParallelModule");
  EXPECT_EQ(b.optimizer->type_name(), "HybridParallelOptimizer");
  std::vector<std::string> after;
  for (auto& [n, p] : model->named_parameters()) after.push_back(n);
  EXPECT_EQ(after, names);  // checkpoints and optimizer state keep their keys
  const int tr = plugin->mesh().coordinate("tp");
  auto q = model->get_tensor("vit.encoder.layer.1.attention.attention.query.weight");
  EXPECT_EQ(q.shape(), (Shape{8, 16}));
  ASSERT_NE(q.region(), nullptr);
  EXPECT_EQ(*q.region(), Region::box({16, 16}, {8 * tr, 0}, {8, 16}));
  auto down = model->get_tensor("vit.encoder.layer.0.output.dense.weight");
  EXPECT_EQ(*down.region(), Region::box({16, 32}, {0, 16 * tr}, {16, 16}));
  EXPECT_EQ(model->get_tensor("vit.encoder.layer.0.output.dense.bias").region(), nullptr);  // added once, whole
  EXPECT_EQ(model->get("vit.encoder.layer.0.attention.attention.key")->type_name(), "Linear1DCol");
  EXPECT_EQ(model->get("vit.encoder.layer.0.attention.output.dense")->type_name(), "Linear1DRow");
  EXPECT_EQ(model->get("vit.encoder.layer.0.output.dropout")->type_name(), "DropoutForReplicatedInput");
  EXPECT_EQ(std::get<int64_t>(model->attribute("vit.encoder.layer.0.attention.attention.num_attention_heads")), 1);
  EXPECT_EQ(std::get<int64_t>(model->attribute("vit.encoder.layer.0.attention.attention.all_head_size")), 8);
  EXPECT_EQ(model->get("classifier")->type_name(), "Linear1DCol");
  EXPECT_EQ(model->get_tensor("classifier.weight").shape(), (Shape{2, 16}));
  Tensor x = Tensor::empty({2, 3, 8, 8});
  Generator(5).normal_(x);
  auto out = b.model(x, Tensor::from_ints({0, 3}, {2}));
  EXPECT_EQ(out.logits.shape(), (Shape{2, 4}));  // gathered
  // Forward and loss equal the unsharded model's.
  manual_seed(3);
  auto ref = std::make_shared<nn::ViTForImageClassification>(c);
  auto want = (*ref)(x, Tensor::from_ints({0, 3}, {2}));
  EXPECT_LE(max_rel_diff(out.logits, want.logits), 1e-5);
  EXPECT_NEAR(out.loss.item(), want.loss.item(), 1e-5);
}

TEST(HybridParallel, CustomPolicyShardsAUsersOwnModel) {
  auto data = [](int s) {
    Tensor x = Tensor::empty({4, 8}), t = Tensor::empty({4, 8});
    Generator(10 + uint64_t(s)).normal_(x);
    Generator(20 + uint64_t(s)).normal_(t);
    return std::make_pair(x, t);
  };
  auto train = [&](std::shared_ptr<Plugin> plugin) {
    manual_seed(11);
    auto m = std::make_shared<MLPBlock>();
    Booster booster(plugin);
    auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.1, 0.9}));
    for (int s = 0; s < 3; ++s) {
      auto [x, t] = data(s);
      b.optimizer->zero_grad();
      Tensor d = sub(b.model(x), t);
      booster.backward(mean(mul(d, d)), *b.optimizer);
      b.optimizer->step();
    }
    if (plugin) {
      // state_dict() holds every state tensor in its logical shape; load_state_dict takes it
      // back, each rank keeping its slice.
      auto sd = b.optimizer->state_dict();
      auto& full = sd.state.at("fc1.weight").buffers.begin()->second;
      EXPECT_EQ(full.shape(), (Shape{16, 8}));
      const auto before = b.optimizer->local_state_dict().state.at("fc1.weight").buffers.begin()->second.to_vector();
      b.optimizer->load_state_dict(sd);
      EXPECT_EQ(b.optimizer->local_state_dict().state.at("fc1.weight").buffers.begin()->second.to_vector(), before);
    }
    return m;
  };
  // Every rank sees the same batch: one data-parallel replica at np 2 (tp 2); at np 4 two
  // replicas average identical gradients.
  auto ref = train(nullptr);
  auto sharded = train(hybrid("precision = 'fp32'\n", std::make_shared<MLPPolicy>()));
  EXPECT_EQ(sharded->get("fc1")->type_name(), "Linear1DCol");
  EXPECT_EQ(sharded->get_tensor("fc2.weight").shape(), (Shape{8, 8}));
  for (auto& [n, p] : ref->named_parameters()) EXPECT_LE(max_rel_diff(sharded->get_tensor(n), p), 1e-5) << n;
  // The same policy by name from a config, ZeRO-2 over the dp group.
  shardformer::register_policy("mlp_block", [] { return std::make_shared<MLPPolicy>(); });
  auto named = train(hybrid("precision = 'fp32'\nzero_stage = 2\ncustom_policy = 'mlp_block'\n"));
  for (auto& [n, p] : ref->named_parameters()) EXPECT_LE(max_rel_diff(named->get_tensor(n), p), 1e-5) << n;
  // Without a policy a model that is not a ViT is refused, naming what to do.
  EXPECT_NE(testkit::error_of([&] { train(hybrid("precision = 'fp32'\n")); }).find("no shardformer policy for a MLPBlock"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([&] { train(hybrid("custom_policy = 'nope'\n")); }).find("registered: "), std::string::npos);
}

TEST(HybridParallel, MixedPrecisionThroughTensorParallelism) {
  // poison: the last data-parallel replica's inputs overflow in the first step; skip_first:
  // the first step is not run at all.
  auto run = [](const std::string& precision, const std::string& zero, bool poison, bool skip_first = false) {
    manual_seed(4);
    auto m = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
    std::shared_ptr<Plugin> plugin =
        precision == "ref" ? nullptr : hybrid("precision = '" + precision + "'\nzero_stage = " + zero + "\n");
    Booster booster(plugin);
    auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.05}));
    const int dp = plugin ? plugin->dp_size() : 1, dr = plugin ? plugin->dp_rank() : 0;
    for (int s = skip_first ? 1 : 0; s < 3; ++s) {
      Tensor x = Tensor::empty({4, 3, 8, 8});
      Generator(30 + uint64_t(s)).normal_(x);
      Tensor y = Tensor::from_ints({0, 1, 2, 0}, {4});
      const int64_t per = 4 / dp;
      Tensor xs = x.narrow(0, dr * per, per).contiguous(), ys = y.narrow(0, dr * per, per).contiguous();
      if (poison && s == 0 && dr == dp - 1) xs.fill_(1e30);
      b.optimizer->zero_grad();
      booster.backward(b.model(xs, ys).loss, *b.optimizer);
      b.optimizer->step();
    }
    return std::make_pair(m, b.optimizer);
  };
  auto [ref, ro] = run("ref", "0", false);
  for (std::string zero : {"0", "2"}) {
    for (std::string precision : {"bf16", "fp16"}) {
      auto [m, opt] = run(precision, zero, false);
      // The masters (fp32) against fp32 training: equal to the half-precision rounding.
      for (auto& [n, p] : ref->named_parameters()) {
        Tensor master = zero == "0" ? opt->find<MixedPrecisionOptimizer>()->masters().master(n) : m->get_tensor(n);
        EXPECT_LE(max_rel_diff(master, p), 3e-2) << precision << " zero " << zero << " " << n;
      }
    }
    // fp16: an overflow on one replica skips the step on every rank: the result is the run
    // without that step, on every rank (hysteresis 2 keeps the scale after one overflow).
    auto [m, opt] = run("fp16", zero, true);
    auto [skipped, sopt] = run("fp16", zero, false, true);
    for (auto& [n, p] : skipped->named_parameters())
      EXPECT_EQ(m->get_tensor(n).to(DType::f32).to_vector(), p.to(DType::f32).to_vector()) << "zero " << zero << " " << n;
  }
}

// Colossal-AI's kernel switches choose the kernels: the fused ones by default (true here,
// against Colossal-AI's False), the plain ops where set false (the same training within
// rounding; the profile shows the plain ops ran), both on under enable_all_optimization; a
// Booster without the plugin sets the fused ones back.
TEST(HybridParallel, KernelSwitchesChooseTheKernels) {
  auto train = [](const std::string& extra) {
    manual_seed(5);
    auto m = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
    Booster booster(hybrid("precision = 'fp32'\n" + extra));
    auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.05}));
    const auto chosen = kernels::fused_kernels();
    Profiler::reset();
    Profiler::enable(true);
    for (int s = 0; s < 2; ++s) {
      Tensor x = Tensor::empty({4, 3, 8, 8});
      Generator(40 + uint64_t(s)).normal_(x);
      b.optimizer->zero_grad();
      booster.backward(b.model(x, Tensor::from_ints({0, 1, 2, 0}, {4})).loss, *b.optimizer);
      b.optimizer->step();
    }
    Profiler::enable(false);
    std::set<std::string> ops;
    for (auto& e : Profiler::entries()) ops.insert(e.name);
    return std::make_tuple(m, chosen, ops);
  };
  auto [fused, fk, fops] = train("");
  EXPECT_TRUE(fk.attention && fk.normalization);
  EXPECT_EQ(fops.count("softmax") + fops.count("rsqrt"), 0u);
  auto [plain, pk, pops] = train("enable_flash_attention = false\nenable_fused_normalization = false\n");
  EXPECT_FALSE(pk.attention || pk.normalization);
  EXPECT_EQ(pops.count("softmax"), 1u);
  EXPECT_EQ(pops.count("rsqrt"), 1u);
  for (auto& [n, p] : fused->named_parameters()) EXPECT_LE(max_rel_diff(plain->get_tensor(n), p), 1e-5) << n;
  auto [one, ok, oops] = train("enable_flash_attention = false\nenable_fused_normalization = true\n");
  EXPECT_TRUE(!ok.attention && ok.normalization);
  auto [all, ak, aops] =
      train("enable_all_optimization = true\nenable_flash_attention = false\nenable_fused_normalization = false\n");
  EXPECT_TRUE(ak.attention && ak.normalization);
  Booster without(nullptr);
  auto m = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
  without.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.05}));
  EXPECT_TRUE(kernels::fused_kernels().attention && kernels::fused_kernels().normalization);
}

TEST(HybridParallel, BadArgumentsAreNamed) {
  auto msg = [](const std::string& extra) { return testkit::error_of([&] { hybrid(extra); }); };
  EXPECT_NE(msg("zero_stage = 3\n").find("zero_stage must be 0, 1 or 2, got 3"), std::string::npos);
  EXPECT_NE(msg("precision = 'fp8'\n").find("precision must be one of fp16, bf16, fp32, got 'fp8'"), std::string::npos);
  EXPECT_NE(msg("enable_sequence_overlap = true\n").find("enable_sequence_overlap needs enable_sequence_parallelism = true"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([] {
              plugins::make_plugin(Config::from_string(
                  "[plugin]\nname = 'hybrid_parallel'\ntp_size = 1\nenable_sequence_parallelism = true\n"));
            }).find("needs tp_size > 1"),
            std::string::npos);
  EXPECT_NE(msg("sequence_parallelism_mode = 'zigzag'\n").find("sequence_parallelism_mode must be one of"), std::string::npos);
  EXPECT_NE(msg("pp_size = 2\npp_style = 'interleaved'\nnum_microbatches = 4\n").find("num_model_chunks > 1"),
            std::string::npos);
  EXPECT_NE(msg("pp_size = 2\n").find("set num_microbatches or microbatch_size"), std::string::npos);
  EXPECT_NE(msg("cpu_offload = true\n").find("cpu_offload needs zero_stage 1 or 2"), std::string::npos);
  EXPECT_NE(testkit::error_of([] {
              plugins::make_plugin(Config::from_string("[plugin]\nname = 'hybrid_parallel'\ntp_size = 3\n"));
            }).find("is not divisible by tp_size 3"),
            std::string::npos);
  EXPECT_NE(msg("tp_sise = 2\n").find("unknown key 'plugin.tp_sise'"), std::string::npos);
  EXPECT_NE(msg("enable_jit_fused = true\n").find("enable_jit_fused: there is no fused bias + GELU"), std::string::npos);
  EXPECT_NE(testkit::error_of([] {
              plugins::HybridParallelOptions::from_config(Config::from_string(
                  "[plugin]\nname = 'hybrid_parallel'\nenable_sequence_parallelism = true\nsp_size = 2\n"
                  "sequence_parallelism_mode = 'ring_attn'\nenable_flash_attention = false\n"))
                  .validate();
            }).find("ring_attn is blockwise FlashAttention by construction"),
            std::string::npos);
  // A model whose heads do not divide by tp: named by the policy.
  auto c = testkit::tiny_vit(1);
  c.num_attention_heads = 1, c.hidden_size = 16;
  auto m = std::make_shared<nn::ViTForImageClassification>(c);
  auto err = testkit::error_of([&] {
    Booster booster(hybrid("precision = 'fp32'\n"));
    booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.1}));
  });
  EXPECT_NE(err.find("num_attention_heads 1 does not divide by tp_size 2"), std::string::npos) << err;
}
