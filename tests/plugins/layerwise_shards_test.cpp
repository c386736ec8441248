// LAMB and LARS over sharded optimizer states (issue 65): the trust ratio's whole-tensor
// norms are summed from the shards (one all-reduce of every parameter's partial sums a step,
// then the tensor-parallel blocks'), so ZeRO-1/2, Gemini, FSDP, HybridParallel's tp 2 with
// ZeRO and Galvatron's layerwise plans (each layer's own groups) and sdp train as one process
// does with the same optimizer. Runs under mpirun -np 1, 2, 4.
#include <gtest/gtest.h>

#include "booster/booster.h"
#include "core/dist/runtime.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "plugins/registry.h"
#include "tests/plugins/vit_cases.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;
using namespace booster::plugin_tests;

namespace {

struct ShardCase {
  std::string name, toml;
  int group = 1;  // ranks of one replica
  std::string plan = "";  // a Galvatron strategy file ({GBS}: the global batch)
  int min_world = 1;
};

// Galvatron's layerwise plan: each layer its own tensor-parallel degree and group and its own
// data-parallel kind and group (ZeRO-2 beside tp 2, ZeRO-3, ZeRO-2 over the world, tp 2 strided).
const char* kLayerwisePlan = R"({"pp_deg": 1, "tp_sizes_enc": "2,1,1,2", "tp_consecutive_flags": "1,1,1,0",
  "dp_types_enc": "0,1,0,0", "checkpoint": "0,0,1,0", "global_bsz": {GBS}, "default_dp_type": "zero2", "vtp": 1})";

const std::vector<ShardCase> kShardCases = {
    {"zero1", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\n"},
    {"zero2", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n"},
    {"gemini", "[plugin]\nname = 'gemini'\nprecision = 'fp32'\nmin_chunk_size_m = 0.002\nsearch_range_m = 0.004\n"},
    {"fsdp_full_shard", "[plugin]\nname = 'torch_fsdp'\nauto_wrap_policy = 'transformer'\n"},
    {"tp2_zero1", "[plugin]\nname = 'hybrid_parallel'\ntp_size = 2\nzero_stage = 1\nprecision = 'fp32'\n", 2},
    {"galvatron_layerwise", "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\n", 1, kLayerwisePlan, 2},
    {"galvatron_sdp", "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\nsdp = 1\nembed_sdp = 1\n"},
};

// A Lamb (with weight decay, bias correction and the no-decay group at trust 1) or a Lars.
std::shared_ptr<optim::Optimizer> make_optimizer(bool lamb, const optim::NamedParams& params) {
  if (lamb) {
    optim::LambOptions o;
    o.lr = 0.02, o.weight_decay = 0.1, o.bias_correction = true;
    return std::make_shared<optim::Lamb>(optim::lamb_param_groups(params, o.weight_decay, true), o);
  }
  optim::LarsOptions o;
  o.lr = 0.5, o.momentum = 0.9, o.weight_decay = 1e-4, o.eeta = 1e-2;
  return std::make_shared<optim::Lars>(optim::lars_param_groups(params, o.weight_decay), o);
}

class LayerwiseShards : public ::testing::TestWithParam<ShardCase> {
 protected:
  void SetUp() override {
    if (dist::world_size() % GetParam().group) GTEST_SKIP() << "needs a multiple of " << GetParam().group << " ranks";
    if (dist::world_size() < GetParam().min_world) GTEST_SKIP() << "needs " << GetParam().min_world << " ranks";
  }
};

TEST_P(LayerwiseShards, TrainsAsOneProcess) {
  const ShardCase& c = GetParam();
  const int n = dist::world_size() / c.group, K = 3;
  const int64_t b = 2;
  for (bool lamb : {true, false}) {
    SCOPED_TRACE(lamb ? "Lamb" : "Lars");
    auto ref = fresh_model(42);
    auto ref_opt = make_optimizer(lamb, ref->named_parameters());
    std::vector<double> ref_losses;
    for (int s = 0; s < K; ++s) {
      auto [x, y] = global_batch(s, n * b);
      ref_opt->zero_grad();
      Tensor loss = (*ref)(x, y).loss;
      ref_losses.push_back(loss.item());
      loss.backward();
      ref_opt->step();
    }
    std::string toml = c.toml;
    if (!c.plan.empty()) {
      std::string plan = c.plan;
      plan.replace(plan.find("{GBS}"), 5, std::to_string(n * b));
      toml += "galvatron_config_path = '" + write_process_file("layerwise_shards_" + c.name, plan) + "'\n";
    }
    Booster booster(plugins::make_plugin(Config::from_string(toml, c.name + ".toml")));
    auto model = fresh_model(42 + uint64_t(dist::world_rank()));  // ranks differ: the plugin broadcasts
    auto boosted = booster.boost(model, make_optimizer(lamb, model->named_parameters()));
    for (int s = 0; s < K; ++s) {
      auto [x, y] = my_slice(global_batch(s, n * b), b, 0, 1, c.group, &booster);
      boosted.optimizer->zero_grad();
      Tensor loss = (*boosted.model)(x, y).loss;
      booster.backward(loss, *boosted.optimizer);
      boosted.optimizer->step();
      EXPECT_NEAR(booster.mean_loss(loss), ref_losses[size_t(s)], 1e-5 * std::abs(ref_losses[size_t(s)])) << "step " << s;
    }
    // Within 1e-4 of each tensor's largest value, and 1e-6 absolute: LAMB divides by the
    // square root of the second moment, so a gradient summed in another order (the ranks'
    // partial sums) moves a small update by its relative rounding, not the rounding of the
    // parameter; the key biases take no gradient at all (softmax ignores a shift of the keys)
    // and their noise is scaled up to about lr x 1e-4. (tp 2 without ZeRO, the unsharded
    // path, differs by the same.) Trust ratios from a chunk's norms instead of the whole
    // tensor's would move every weight by percent.
    const ShardedState got = boosted.model->checkpoint_state();
    for (auto& [name, p] : ref->named_parameters()) {
      const float d = testkit::max_abs_diff(testkit::logical_state(got, name), p);
      double scale = 0;
      for (float v : p.to_vector()) scale = std::max(scale, double(std::abs(v)));
      EXPECT_LE(d, 1e-6 + 1e-4 * scale) << name;
    }
  }
}

void PrintTo(const ShardCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Plugins, LayerwiseShards, ::testing::ValuesIn(kShardCases),
                         [](const auto& info) { return info.param.name; });

}  // namespace
