// LoRA under every plugin (Booster::enable_lora): a LoRA run trains as one process does
// (losses, adapters) with the base frozen bit for bit; save_lora_as_pretrained writes
// PEFT's folder from any layout and enable_lora(pretrained_dir) continues from it; a full
// checkpoint of a LoRA run loads back exactly. On the tiny ViT and on GPT-2 and LLaMA
// (conformance_model.h), adapters on every linear layer ("all-linear"), so the
// tensor-parallel cases split them along the columns and along the rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "booster/booster.h"
#include "core/dist/runtime.h"
#include "core/kernels/raw.h"
#include "nn/safetensors.h"
#include "plugins/registry.h"
#include "tests/plugins/conformance_model.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;
using namespace booster::plugin_tests;

namespace {

struct LoraCase {
  std::string name;
  std::string toml;  // the [plugin] table; empty: no plugin
  int group = 1;     // ranks of one data-parallel replica (tp x pp, or the sp axis)
  bool pipeline = false;
  int ranks = 0;     // the world must be a multiple of this (0: of group)
};

const std::string kHybrid = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\n";
const std::vector<LoraCase> kLoraCases = {
    {"no_plugin", ""},
    {"torch_ddp", "[plugin]\nname = 'torch_ddp'\n"},
    {"zero1_offload", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\ncpu_offload = true\n"},
    {"zero2", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n"},
    {"gemini", "[plugin]\nname = 'gemini'\nprecision = 'fp32'\nmin_chunk_size_m = 0.002\nsearch_range_m = 0.004\n"},
    {"fsdp_full_shard", "[plugin]\nname = 'torch_fsdp'\nauto_wrap_policy = 'transformer'\n"},
    {"tp2", kHybrid + "tp_size = 2\n", 2},
    {"tp2_zero2", kHybrid + "tp_size = 2\nzero_stage = 2\n", 2},
    {"sp2_all_to_all", kHybrid + "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\nsp_size = 2\n", 2},
    {"pp2_1f1b", kHybrid + "pp_size = 2\nnum_microbatches = 2\n", 2, true},
    {"tp2_pp2", kHybrid + "tp_size = 2\npp_size = 2\nnum_microbatches = 2\n", 4, true},
    // Galvatron's layers hand the batch on split over all ranks: each rank a replica's rows.
    {"galvatron_tp2_zero2", "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\nglobal_tp_deg = 2\n"
                            "default_dp_type = 'zero2'\n", 1, false, 2},
};

std::shared_ptr<Plugin> make(const LoraCase& c) {
  return c.toml.empty() ? nullptr : plugins::make_plugin(Config::from_string(c.toml, c.name + ".toml"));
}

nn::LoraConfig lora_config() {
  nn::LoraConfig c;
  c.r = 4, c.lora_alpha = 8, c.target_modules = {"all-linear"};
  return c;
}

// The model with adapters; lora_B random (PEFT starts it at zero, where A's first
// gradients would be zero too and hide a wrong split).
std::shared_ptr<ConfModel> lora_model(Booster& booster, uint64_t seed) {
  auto m = conf_model(seed);
  booster.enable_lora(m, lora_config());
  NoGradGuard ng;
  Generator g(seed + 100);
  for (auto& [name, p] : m->named_parameters())
    if (name.find(".lora_B.") != std::string::npos) {
      Tensor t = p;
      g.normal_(t);
      kernels::scale_(t, 0.05);
    }
  return m;
}

// Every parameter's logical tensor against a plain model's, within tol x its largest value.
void expect_close(ModelWrapper& got, nn::Module& want, double tol, const std::string& what,
                  bool frozen_only = false) {
  const ShardedState g = got.checkpoint_state();
  for (auto& [n, p] : want.named_parameters()) {
    if (frozen_only && p.requires_grad()) continue;
    auto a = testkit::logical_state(g, n).to_vector(), b = p.to(DType::f32).to_vector();
    ASSERT_EQ(a.size(), b.size()) << what << ": " << n;
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double(std::abs(b[i])));
      err = std::max(err, double(std::abs(a[i] - b[i])));
    }
    EXPECT_LE(err, tol * scale) << what << ": " << n << " differs by " << err;
  }
}

Tensor forward_backward(Booster& bo, BoostResult<ConfModel>& r, const LoraCase& c, const Tensor& x, const Tensor& y) {
  if (!c.pipeline) {
    Tensor loss = (*r.model)(x, y).loss;
    bo.backward(loss, *r.optimizer);
    return loss.detach();
  }
  nn::Module& m = *r.model->module();
  StageCriterion ce = [&m](const TensorMap& out, const TensorMap& batch) {
    return conf_loss(m, out.at("logits"), batch.at("labels"));
  };
  return bo.execute_pipeline(single_batch({{kConfInput, x}, {"labels", y}}), *r.model, ce, r.optimizer.get()).loss;
}

std::string temp_dir(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("booster_lora_" + std::string(kConfName) + "_" + what + "_np" + std::to_string(dist::world_size())))
      .string();
}

class LoraPlugins : public ::testing::TestWithParam<LoraCase> {
 protected:
  void SetUp() override {
    if (GetParam().toml.empty() && dist::world_size() > 1) GTEST_SKIP() << "without a plugin, ranks do not share gradients";
    const int ranks = GetParam().ranks ? GetParam().ranks : GetParam().group;
    if (dist::world_size() % ranks) GTEST_SKIP() << "needs a multiple of " << ranks << " ranks";
  }
  const int64_t b = 2;
  const int n = dist::world_size() / GetParam().group;
};

// K steps under the plugin equal one process's on the global batches: the losses, the
// adapters, and the frozen base unchanged bit for bit. Then PEFT's folder from this layout
// holds the reference's adapters, and a full checkpoint loads back exactly.
TEST_P(LoraPlugins, TrainsAsOneProcessAndSavesPeftsFolder) {
  const LoraCase& c = GetParam();
  const int K = 3;
  Booster rb;
  auto ref = lora_model(rb, 42);
  optim::SGD ref_opt(nn::trainable_parameters(*ref), sgd());
  std::vector<double> ref_losses;
  for (int s = 0; s < K; ++s) {
    auto [x, y] = conf_batch(s, n * b);
    ref_opt.zero_grad();
    Tensor loss = (*ref)(x, y).loss;
    ref_losses.push_back(loss.item());
    loss.backward();
    ref_opt.step();
  }

  Booster booster(make(c));
  auto model = lora_model(booster, 42 + uint64_t(dist::world_rank()) * (c.toml.empty() ? 0 : 1));  // ranks differ
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(nn::trainable_parameters(*model), sgd()));
  for (int s = 0; s < K; ++s) {
    auto [x, y] = my_slice(conf_batch(s, n * b), b, 0, 1, c.group, &booster);
    boosted.optimizer->zero_grad();
    const double logged = booster.mean_loss(forward_backward(booster, boosted, c, x, y));
    boosted.optimizer->step();
    EXPECT_NEAR(logged, ref_losses[size_t(s)], 1e-5 * std::abs(ref_losses[size_t(s)])) << "step " << s;
  }
  expect_close(*boosted.model, *ref, 1e-5, "after training");
  expect_close(*boosted.model, *ref, 0, "the frozen base", /*frozen_only=*/true);

  // PEFT's folder, written from this layout, read back by a process of its own.
  const std::string dir = temp_dir(c.name);
  booster.save_lora_as_pretrained(*boosted.model, dir + "/lora");
  EXPECT_FALSE(std::filesystem::exists(dir + "/lora/.adapter_staging.ckpt"));
  const auto file = nn::load_safetensors(dir + "/lora/adapter_model.safetensors");
  int64_t adapters = 0;
  for (auto& [name, p] : ref->named_parameters())
    if (p.requires_grad()) {
      ++adapters;
      ASSERT_TRUE(file.contains(nn::kPeftPrefix + name)) << name;
      auto got = file.at(nn::kPeftPrefix + name).to_vector(), want = p.to_vector();
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << name;
    }
  EXPECT_EQ(int64_t(file.tensors.size()), adapters);
  Booster again;
  auto cont = conf_model(42);
  again.enable_lora(cont, dir + "/lora");
  EXPECT_EQ(again.lora_state()->config.r, 4);
  {
    auto [x, y] = conf_batch(9, 2);
    NoGradGuard ng;
    auto got = (*cont)(x, y).logits.to_vector(), want = (*ref)(x, y).logits.to_vector();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4);
  }

  // A full checkpoint of the LoRA run (base and adapters) loads back exactly under the plugin.
  booster.save_model(*boosted.model, dir + "/model", true);
  booster.save_optimizer(*boosted.optimizer, dir + "/optim", true);
  Booster lb(make(c));
  auto loaded = lora_model(lb, 7);
  auto lr = lb.boost(loaded, std::make_shared<optim::SGD>(nn::trainable_parameters(*loaded), sgd()));
  lb.load_model(*lr.model, dir + "/model");
  lb.load_optimizer(*lr.optimizer, dir + "/optim");
  expect_close(*lr.model, *ref, 1e-5, "loaded from the full checkpoint");
  dist::barrier(dist::ProcessGroup::world());
  if (dist::world_rank() == 0) std::filesystem::remove_all(dir);
}

// Layouts LoRA cannot hold are refused at boost, naming the layer and why: a grid's weights
// split both ways (2D, np 4), and split_gather's token shards beside the linears (np 2).
TEST(LoraPluginsRefuse, LayoutsTheAdaptersCannotFollow) {
  auto refused = [](const std::string& toml, int ranks, const std::string& needle) {
    if (dist::world_size() != ranks) return;
    Booster booster(plugins::make_plugin(Config::from_string(toml, "refused.toml")));
    auto m = conf_model(42);
    booster.enable_lora(m, lora_config());
    const std::string err = testkit::error_of([&] { booster.boost(m); });
    EXPECT_NE(err.find(needle), std::string::npos) << err;
  };
  refused(kHybrid + "tp_size = 2\nenable_sequence_parallelism = true\n", 2, "sequence-parallel (split_gather / ring)");
  if (kConfTensorParallel) refused(kHybrid + "tp_size = 4\ntp_mode = '2d'\n", 4, "split along both dims");
  // After boost, or twice, or QLoRA: named too.
  Booster b;
  auto m = conf_model(42);
  b.boost(m);
  EXPECT_NE(testkit::error_of([&] { b.enable_lora(m, lora_config()); }).find("before boosting"), std::string::npos);
  Booster q;
  LoraOptions o;
  o.lora_config = lora_config();
  o.quantize = true;
  EXPECT_NE(testkit::error_of([&] { q.enable_lora(conf_model(42), o); }).find("QLoRA"), std::string::npos);
}

void PrintTo(const LoraCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Plugins, LoraPlugins, ::testing::ValuesIn(kLoraCases),
                         [](const auto& info) { return info.param.name; });

}  // namespace
