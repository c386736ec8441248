// TorchFSDPPlugin specifics (the conformance suite covers training parity, no_sync,
// clipping and checkpoints to and from every other layout for FULL_SHARD with the
// transformer policy, SHARD_GRAD_OP and NO_SHARD): the auto-wrap policies cut the model into
// units that are the engine's buckets; FULL_SHARD keeps about 1/dp of the parameters
// between steps and a unit whole only while it is used; cpu_offload keeps the slices,
// masters and states on the disk tier; bf16 mixed precision trains; bad arguments are named.
// Runs at np 1, 2 and 4.
#include <gtest/gtest.h>

#include "nn/gpt2.h"

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/registry.h"
#include "plugins/torch_fsdp/torch_fsdp_plugin.h"
#include "tests/support/fixtures.h"
#include "zero/model.h"

using namespace booster;

namespace {

std::shared_ptr<Plugin> fsdp(const std::string& extra) {
  return plugins::make_plugin(Config::from_string("[plugin]\nname = 'torch_fsdp'\n" + extra, "fsdp.toml"));
}

std::shared_ptr<nn::ViTForImageClassification> vit(uint64_t seed = 1) {
  manual_seed(seed);
  return std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(3));
}

std::pair<Tensor, Tensor> batch(int64_t rows, uint64_t seed) { return testkit::image_batch(rows, seed); }

zero::Engine& engine_of(BoostResult<nn::ViTForImageClassification>& b) {
  auto* z = b.model->find<zero::LowLevelZeroModel>();
  EXPECT_NE(z, nullptr);
  return *z->engine();
}

// Trains `steps` steps on one batch; returns the first and last loss.
std::pair<double, double> train(Booster& booster, BoostResult<nn::ViTForImageClassification>& b, int steps) {
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(4, 7);
    b.optimizer->zero_grad();
    Tensor loss = (*b.model)(x, y).loss;
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    last = booster.mean_loss(loss);
    if (s == 0) first = last;
  }
  return {first, last};
}

}  // namespace

// The policies' units: the root always, then each ViTLayer (transformer) or each subtree
// of at least min_num_params not inside another unit (size_based).
TEST(TorchFSDP, AutoWrapPoliciesCutTheModelIntoUnits) {
  auto model = vit();
  plugins::TorchFSDPOptions o;
  EXPECT_EQ(plugins::fsdp_units(*model, o), (std::vector<std::string>{""}));
  o.auto_wrap_policy = "transformer";
  EXPECT_EQ(plugins::fsdp_units(*model, o),
            (std::vector<std::string>{"", "vit.encoder.layer.0", "vit.encoder.layer.1", "vit.encoder.layer.2"}));
  o.auto_wrap_policy = "size_based";
  o.min_num_params = 1;  // every top-level child is a unit, nothing below it
  EXPECT_EQ(plugins::fsdp_units(*model, o), (std::vector<std::string>{"", "vit", "classifier"}));
  // Without transformer_layer_cls the units are a PipelineModule's layers, whatever their type.
  o.auto_wrap_policy = "transformer";
  nn::GPT2LMHeadModel gpt2(nn::GPT2Config::preset("gpt2-tiny"));
  EXPECT_EQ(plugins::fsdp_units(gpt2, o), (std::vector<std::string>{"", "transformer.h.0", "transformer.h.1"}));
  nn::Linear plain(4, 4);
  try {
    plugins::fsdp_units(plain, o);
    FAIL() << "a model without layers got units";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs transformer_layer_cls"), std::string::npos) << e.what();
  }
}

// A transformer_layer_cls that names no module is refused, naming it and the module types
// there are (it used to make the whole model one unit, silently); a size_based policy that
// wraps nothing but the root says so, with the unit count and sizes boost logs.
TEST(TorchFSDP, AWrapPolicyThatMatchesNothingIsNamed) {
  auto model = vit();
  plugins::TorchFSDPOptions o;
  o.auto_wrap_policy = "transformer";
  o.transformer_layer_cls = "ViTLayer, NoSuchLayer";
  try {
    plugins::fsdp_units(*model, o);
    FAIL() << "NoSuchLayer was taken";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("transformer_layer_cls 'NoSuchLayer' matches no module of the ViTForImageClassification"),
              std::string::npos) << m;
    EXPECT_NE(m.find("ViTLayer"), std::string::npos) << m;
    EXPECT_NE(m.find("Linear"), std::string::npos) << m;
  }
  o.transformer_layer_cls = "ViTLayer";
  auto units = plugins::fsdp_units(*model, o);
  auto params = plugins::fsdp_unit_params(*model, units);
  int64_t total = 0, layer0 = 0;
  for (auto& [n, p] : model->named_parameters()) {
    total += p.numel();
    if (n.rfind("vit.encoder.layer.0.", 0) == 0) layer0 += p.numel();
  }
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[1], layer0);
  EXPECT_EQ(params[0] + 3 * layer0, total);
  const std::string line = plugins::describe_fsdp_units(units, params, o);
  EXPECT_NE(line.find("4 unit(s) (auto_wrap_policy 'transformer'): largest " + std::to_string(std::max(params[0], layer0))),
            std::string::npos) << line;
  o.auto_wrap_policy = "size_based";
  o.min_num_params = total + 1;  // nothing but the whole model is that large
  units = plugins::fsdp_units(*model, o);
  ASSERT_EQ(units.size(), 1u);
  const std::string one = plugins::describe_fsdp_units(units, plugins::fsdp_unit_params(*model, units), o);
  EXPECT_NE(one.find("1 unit(s)"), std::string::npos) << one;
  EXPECT_NE(one.find("wraps no module below the root"), std::string::npos) << one;
  EXPECT_NE(one.find("largest " + std::to_string(total)), std::string::npos) << one;
}

// Each unit is one bucket (a flat parameter), in the order backward finishes them; under
// FULL_SHARD no unit is whole between steps, and during forward at most the root, the
// unit running and the one prefetched are.
TEST(TorchFSDP, FullShardKeepsUnitsShardedOutsideTheirUse) {
  auto model = vit();
  Booster booster(fsdp("auto_wrap_policy = 'transformer'\n"));
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.05}));
  EXPECT_EQ(b.model->type_name(), "FullyShardedDataParallel");
  zero::Engine& eng = engine_of(b);
  const auto& buckets = eng.layout().buckets();
  ASSERT_EQ(buckets.size(), 4u);  // three layers and the root
  for (size_t i : buckets[0]) EXPECT_EQ(eng.layout().parts()[i].name.rfind("vit.encoder.layer.2.", 0), 0u);
  for (size_t i : buckets[3]) EXPECT_EQ(eng.layout().parts()[i].name.find("vit.encoder.layer."), std::string::npos);
  size_t largest_unit = 0, root = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    size_t bytes = 0;
    for (size_t i : buckets[k]) bytes += size_t(eng.layout().parts()[i].numel) * 4;
    (k == 3 ? root : largest_unit) = std::max(k == 3 ? root : largest_unit, bytes);
  }
  size_t peak = 0;
  auto probe = (*model->vit->encoder->layer)[1].register_forward_hook(
      [&](nn::Module&) { peak = std::max(peak, eng.gatherer().full_bytes()); });
  auto [first, last] = train(booster, b, 4);
  EXPECT_LT(last, first);
  EXPECT_EQ(eng.gatherer().full_bytes(), 0u) << "after the step";
  EXPECT_GT(peak, 0u);
  EXPECT_LE(peak, root + 2 * largest_unit) << "the root, the running unit and the prefetched one";
}

// cpu_offload: the slices, masters and optimizer states live on the disk tier, and training goes on.
TEST(TorchFSDP, CpuOffloadKeepsShardsOnDiskAndTrains) {
  auto model = vit();
  Booster booster(fsdp("auto_wrap_policy = 'transformer'\ncpu_offload = true\n"));
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.05, 0.9}));
  zero::Engine& eng = engine_of(b);
  ASSERT_NE(eng.shards().store(), nullptr);
  for (size_t i = 0; i < eng.layout().size(); ++i) {
    const auto& s = eng.shards().at(i);
    if (eng.layout().parts()[i].n == 0) continue;
    EXPECT_GE(s.own_slot, 0) << eng.layout().parts()[i].name;
    EXPECT_FALSE(s.master.defined()) << eng.layout().parts()[i].name;
  }
  auto [first, last] = train(booster, b, 4);
  EXPECT_LT(last, first);
  EXPECT_GT(eng.shards().store()->bytes_read(), 0u);
}

// MixedPrecision(param_dtype = bf16): bf16 working copies, fp32 masters in the checkpoint;
// under each strategy the loss falls, and NO_SHARD is DDP (no ZeRO engine).
TEST(TorchFSDP, Bf16MixedPrecisionUnderEveryStrategy) {
  for (std::string strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
    SCOPED_TRACE(strategy);
    auto model = vit();
    Booster booster(fsdp("sharding_strategy = '" + strategy + "'\n[plugin.mixed_precision]\nparam_dtype = 'bf16'\n"));
    auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.05}));
    EXPECT_EQ(b.model->find<zero::LowLevelZeroModel>() == nullptr, strategy == "NO_SHARD");
    ASSERT_NE(b.model->grad_sync(), nullptr);
    auto [first, last] = train(booster, b, 4);
    EXPECT_LT(last, first);
    for (auto& st : b.model->checkpoint_state()) {
      if (st.name == "classifier.weight") {
        EXPECT_EQ(st.dtype(), DType::f32);
      }
    }
  }
}

TEST(TorchFSDP, BadArgumentsAreNamed) {
  auto msg = [](const std::string& extra) { return testkit::error_of([&] { fsdp(extra); }); };
  EXPECT_NE(msg("sharding_strategy = 'HYBRID_SHARD'\n").find("HYBRID_SHARD is not implemented"), std::string::npos);
  EXPECT_NE(msg("auto_wrap_policy = 'always'\n").find("auto_wrap_policy must be"), std::string::npos);
  EXPECT_NE(msg("[plugin.mixed_precision]\nparam_dtype = 'fp8'\n").find("mixed_precision.param_dtype"), std::string::npos);
  EXPECT_NE(msg("sharding_strategy = 'NO_SHARD'\ncpu_offload = true\n").find("NO_SHARD keeps everything in RAM"),
            std::string::npos);
  EXPECT_NE(msg("backward_prefetch = 'EARLY'\n").find("backward_prefetch must be"), std::string::npos);
  EXPECT_NE(msg("bucket_cap_mb = 1\n").find("bucket_cap_mb"), std::string::npos);  // not an FSDP argument
}
