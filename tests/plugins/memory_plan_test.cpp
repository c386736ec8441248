// A run config's plugin as the cost model's plan (plugins/memory_plan.h): what each plugin
// amounts to, the ZeRO-3 gather units, and what the estimate refuses.
#include "plugins/memory_plan.h"

#include <gtest/gtest.h>

#include "core/common/check.h"
#include "nn/vit.h"
#include "plugins/gemini/gemini_plugin.h"
#include "plugins/torch_fsdp/torch_fsdp_plugin.h"
#include "vit_cases.h"

using namespace booster;
using booster::galvatron::DpKind;

namespace {

plugins::MemoryPlan plan_of(const std::string& toml, int world, int64_t batch = 4, double ratio = 0) {
  const Config cfg = Config::from_string(toml, "run.toml");
  const auto model = plugin_tests::fresh_model();
  return plugins::memory_plan(cfg, "plugin", *model, world, batch, ratio, "fp32");
}

int64_t params_of(const nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST(MemoryPlan, DataParallelPluginsAreTheirDataParallelKinds) {
  const auto none = plan_of("", 2);
  EXPECT_EQ(none.plan.layers.size(), 4u);
  EXPECT_EQ(none.plan.dp_kind(none.plan.layers[0]), DpKind::ddp);
  EXPECT_EQ(none.plan.global_bsz, 8);
  EXPECT_EQ(none.precision, "fp32");
  const auto zero = plan_of("[plugin]\nname = \"low_level_zero\"\nstage = 1\nprecision = \"bf16\"\ncpu_offload = true\n", 4);
  EXPECT_EQ(zero.plan.dp_kind(zero.plan.layers[0]), DpKind::zero2);
  EXPECT_EQ(zero.precision, "bf16");
  EXPECT_TRUE(zero.offload_states);
  EXPECT_EQ(zero.plan.global_bsz, 16);
  const auto grad_op = plan_of("[plugin]\nname = \"torch_fsdp\"\nsharding_strategy = \"SHARD_GRAD_OP\"\n", 2);
  EXPECT_EQ(grad_op.plan.dp_kind(grad_op.plan.layers[3]), DpKind::zero2);
  EXPECT_EQ(grad_op.zero3_unit_params, 0);
}

TEST(MemoryPlan, ZeroThreeGathersGeminiChunksAndFsdpUnits) {
  const auto model = plugin_tests::fresh_model();
  // Gemini's defaults: a 32 M-element minimum chunk holds this whole model.
  const auto gemini = plan_of("[plugin]\nname = \"gemini\"\nprecision = \"fp32\"\n", 2);
  EXPECT_TRUE(gemini.plan.layers[0].sdp && gemini.plan.embed_sdp);
  EXPECT_GE(gemini.zero3_unit_params, double(params_of(*model)));
  // A given chunk size is the unit (at least the largest parameter).
  const auto small = plan_of("[plugin]\nname = \"gemini\"\n[plugin.chunk_config_dict]\nchunk_size = 5000\n", 2);
  plugins::GeminiOptions go;
  go.chunk_size = 5000;
  std::vector<int64_t> numels;
  for (auto& [n, p] : model->named_parameters()) numels.push_back(p.numel());
  EXPECT_EQ(small.zero3_unit_params, double(plugins::gemini_chunk_elems(go, numels)));
  // FSDP: the root alone gathers everything; a unit a ViTLayer gathers the largest unit.
  const auto root = plan_of("[plugin]\nname = \"torch_fsdp\"\n", 2);
  EXPECT_EQ(root.zero3_unit_params, double(params_of(*model)));
  const auto wrapped = plan_of("[plugin]\nname = \"torch_fsdp\"\nauto_wrap_policy = \"transformer\"\n", 2);
  plugins::TorchFSDPOptions fo;
  fo.auto_wrap_policy = "transformer";
  const auto units = plugins::fsdp_units(*model, fo);
  const auto sizes = plugins::fsdp_unit_params(*model, units);
  EXPECT_EQ(units.size(), 5u);  // the root and four layers
  EXPECT_EQ(wrapped.zero3_unit_params, double(*std::max_element(sizes.begin(), sizes.end())));
  EXPECT_LT(wrapped.zero3_unit_params, root.zero3_unit_params);
}

TEST(MemoryPlan, HybridParallelIsItsMeshAndCheckpointsEachStagesFirstLayers) {
  const auto h = plan_of("[plugin]\nname = \"hybrid_parallel\"\ntp_size = 2\npp_size = 2\nnum_microbatches = 4\n"
                         "zero_stage = 1\nprecision = \"fp32\"\n",
                         8, 4, 0.5);
  EXPECT_EQ(h.plan.pp_deg, 2);
  EXPECT_EQ(h.plan.chunks, 4);
  EXPECT_EQ(h.plan.layers[0].tp, 2);
  EXPECT_EQ(h.plan.vtp, 2);
  EXPECT_EQ(h.plan.dp_kind(h.plan.layers[0]), DpKind::zero2);
  EXPECT_EQ(h.plan.global_bsz, 8);  // 4 rows on each of dp 2
  // Two layers a stage, the first of each checkpointed.
  std::vector<bool> ck;
  for (auto& l : h.plan.layers) ck.push_back(l.checkpoint);
  EXPECT_EQ(ck, (std::vector<bool>{true, false, true, false}));
}

TEST(MemoryPlan, WhatTheCostModelDoesNotModelIsRefusedNamingTheKey) {
  auto refused = [](const std::string& toml, int world, const std::string& says) {
    try {
      plan_of(toml, world);
      ADD_FAILURE() << "accepted: " << toml;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("[plugin]\nname = \"hybrid_parallel\"\ntp_size = 4\ntp_mode = \"2d\"\n", 4, "plugin.tp_mode");
  refused("[plugin]\nname = \"gemini\"\nplacement_policy = \"auto\"\n", 2, "placement_policy");
  refused("[plugin]\nname = \"deepspeed\"\n", 2, "'deepspeed'");
  refused("[plugin]\nname = \"hybrid_parallel\"\npp_size = 2\n", 2, "num_microbatches");
  refused("[plugin]\nname = \"hybrid_parallel\"\ntp_size = 3\n", 4, "tp_size");
  refused("[plugin]\nname = \"low_level_zero\"\nstagee = 2\n", 2, "stagee");  // the plugin's own key check
}
