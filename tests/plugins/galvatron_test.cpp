// GalvatronPlugin beyond the conformance suite: pipelines under layerwise plans (1F1B and
// GPipe, stages of mixed layers) train as one process does; a plan written by HybridPlan
// reads back the same; bad strategy files and arguments are refused naming the key and the
// file, before any rank waits on another.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "booster/booster.h"
#include "core/dist/ring_collectives.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/galvatron/galvatron_plugin.h"
#include "galvatron/search.h"
#include "plugins/registry.h"
#include "tests/plugins/vit_cases.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;
using namespace booster::plugin_tests;
using booster::galvatron::HybridPlan;
using gv_layer = booster::galvatron::LayerStrategy;

namespace {

// A strategy file of this rank (every rank reads its own copy).
std::string write_plan(const std::string& name, const std::string& json) {
  return write_process_file("galvatron_test_" + name, json);
}

std::shared_ptr<Plugin> plugin_for(const std::string& name, const std::string& json, const std::string& extra = "") {
  const std::string toml = "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\n" + extra +
                           (json.empty() ? "" : "galvatron_config_path = '" + write_plan(name, json) + "'\n");
  return plugins::make_plugin(Config::from_string(toml, name + ".toml"));
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << needles.front() << "'";
  } catch (const Error& e) {
    for (auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// K steps through execute_pipeline under a plan with pp_deg 2 against one process: losses
// and every parameter within 1e-5.
void pipeline_parity(const std::string& name, const std::string& json) {
  const int world = dist::world_size(), stage = world / 2;
  const int64_t b = 2, replicas = stage;  // vtp 1: each local rank of a stage is a replica
  const int K = 3;
  auto ref = fresh_model();
  optim::SGD ref_opt(ref->named_parameters(), sgd());
  std::vector<double> ref_losses;
  for (int s = 0; s < K; ++s) {
    auto [x, y] = global_batch(s, replicas * b);
    ref_opt.zero_grad();
    Tensor loss = (*ref)(x, y).loss;
    ref_losses.push_back(loss.item());
    loss.backward();
    ref_opt.step();
  }
  Booster booster(plugin_for(name, json));
  ASSERT_TRUE(booster.plugin()->support_pipeline());
  EXPECT_EQ(booster.plugin()->dp_size(), stage);
  auto model = fresh_model(42 + uint64_t(dist::world_rank()));  // ranks differ: boost makes them agree
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  StageCriterion ce = [](const TensorMap& out, const TensorMap& batch) {
    return cross_entropy(out.at("logits"), batch.at("labels"));
  };
  for (int s = 0; s < K; ++s) {
    auto [gx, gy] = global_batch(s, replicas * b);
    const int64_t first = int64_t(booster.plugin()->dp_rank()) * b;
    Tensor x = gx.narrow(0, first, b).contiguous(), y = gy.narrow(0, first, b).contiguous();
    boosted.optimizer->zero_grad();
    PipelineResult res = booster.execute_pipeline(single_batch({{"pixel_values", x}, {"labels", y}}), *boosted.model,
                                                  ce, boosted.optimizer.get(), true, false);
    boosted.optimizer->step();
    const double logged = booster.mean_loss(res.loss);
    EXPECT_NEAR(logged, ref_losses[size_t(s)], 1e-5 * std::abs(ref_losses[size_t(s)])) << name << " step " << s;
  }
  const ShardedState got = boosted.model->checkpoint_state();
  for (auto& [n, p] : ref->named_parameters()) {
    Tensor mine = testkit::logical_state(got, n);
    auto a = mine.to_vector(), w = p.to_vector();
    ASSERT_EQ(a.size(), w.size()) << n;
    double err = 0, scale = 1e-3;
    for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::abs(a[i] - w[i]))), scale = std::max(scale, double(std::abs(w[i])));
    EXPECT_LE(err, 1e-5 * scale) << name << ": parameter " << n;
  }
}

TEST(Galvatron, PipelineOfMixedStagesMatchesOneProcess) {
  if (dist::world_size() != 4) GTEST_SKIP() << "the plans are for 4 ranks";
  // Stage 0: tp 2 consecutive, then ZeRO-3; stage 1: checkpointed DDP, then tp 2 strided.
  const std::string layers = R"("tp_sizes_enc": "2,1,1,2", "tp_consecutive_flags": "1,1,1,0", "dp_types_enc": "0,1,0,0",
    "checkpoint": "0,0,1,0", "global_bsz": 4, "pp_division": "2,2", "default_dp_type": "ddp", "vtp": 1)";
  pipeline_parity("pp2_1f1b", R"({"pp_deg": 2, "chunks": 2, "pipeline_type": "pipedream_flush", )" + layers + "}");
  pipeline_parity("pp2_gpipe", R"({"pp_deg": 2, "chunks": 2, "pipeline_type": "gpipe", )" + layers + "}");
  // Uneven stages (1 + 3 layers) and micro-batches of one row.
  pipeline_parity("pp2_uneven", R"({"pp_deg": 2, "chunks": 2, "pipeline_type": "pipedream_flush", "tp_sizes_enc": "1,2,2,1",
    "tp_consecutive_flags": "1,1,0,1", "dp_types_enc": "0,0,0,1", "checkpoint": "1,0,0,0", "pp_division": "1,3",
    "default_dp_type": "zero2"})");
  // Every layer data parallel over its stage's 2 ranks (the plan a pp_deg alone gives).
  pipeline_parity("pp2_ddp", R"({"pp_deg": 2, "chunks": 2, "pipeline_type": "pipedream_flush", "tp_sizes_enc": "1,1,1,1",
    "default_dp_type": "ddp"})");
}

// Galvatron's switches as its command line writes them (`--sdp 1 --global_tp_consec 0`):
// 0 and 1 taken as well as booleans; another integer named with its key.
TEST(Galvatron, SwitchesTakeZeroAndOneAsGalvatronWritesThem) {
  auto read = [](const std::string& keys) {
    return plugins::GalvatronOptions::from_config(Config::from_string("[plugin]\nname = 'galvatron'\n" + keys, "g.toml"));
  };
  const auto o = read("sdp = 1\nglobal_tp_consec = 0\nglobal_checkpoint = 1\nembed_sdp = 1\nvocab_sp = 0\nuse_ulysses = false\n");
  EXPECT_TRUE(o.sdp);
  EXPECT_FALSE(o.global_tp_consec);
  EXPECT_TRUE(o.global_checkpoint);
  EXPECT_TRUE(o.embed_sdp);
  EXPECT_FALSE(o.vocab_sp);
  const std::string err = testkit::error_of([&] { read("sdp = 2\n"); });
  EXPECT_NE(err.find("key 'plugin.sdp' must be a boolean (or 0 / 1), got an integer"), std::string::npos) << err;
}

TEST(Galvatron, PlanWrittenReadsBackTheSame) {
  HybridPlan p;
  p.pp_deg = 2;
  p.layers = {{2, true, false, false}, {4, false, true, true}, {1, true, true, false}, {2, false, true, false, true}};
  p.pp_division = {1, 3};
  p.global_bsz = 64, p.chunks = 4, p.pipeline_type = "gpipe", p.default_dp_type = "zero2", p.vtp = 2, p.embed_sdp = true;
  p.vsp = true;
  HybridPlan q = HybridPlan::from_json(p.to_json(), "memory");
  EXPECT_TRUE(q.vsp);
  EXPECT_NE(q.summary(16).find("vtp 2 (Ulysses)"), std::string::npos) << q.summary(16);
  EXPECT_EQ(q.boundary(), (gv_layer{2, true, true, false, true}));
  EXPECT_EQ(q.layers, p.layers);
  EXPECT_EQ(q.pp_division, p.pp_division);
  EXPECT_EQ(q.to_json(), p.to_json());
  EXPECT_EQ(q.describe(q.layers[1], 16), "2-4-2*f-c");
  EXPECT_EQ(q.describe(q.layers[0], 16), "2-2*-4z2");
  EXPECT_EQ(q.describe(q.layers[3], 16), "2-2-4*f-sp");  // Ulysses of degree 2, ZeRO-3 over the stage
  EXPECT_NE(q.to_json().find("\"use_sp\": \"0,0,0,1\""), std::string::npos) << q.to_json();
  // A Ulysses group of one is plain data parallelism.
  EXPECT_FALSE((gv_layer{1, true, false, false, true}).ulysses());
}

TEST(Galvatron, BadStrategyFilesAreRefusedNamingKeyAndFile) {
  const int w = dist::world_size();
  auto model = [] { return fresh_model(); };
  auto boost = [&](const std::shared_ptr<Plugin>& p) {
    Booster bo(p);
    auto m = model();
    bo.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), sgd()));
  };
  // Degrees that do not multiply into the world.
  expect_error([&] { plugin_for("tp3", R"({"pp_deg": 1, "tp_sizes_enc": "3,1,1,1"})"); },
               {"tp_sizes_enc", "galvatron_test_tp3", "power of two"});
  expect_error([&] { plugin_for("tp_big", "{\"pp_deg\": 1, \"tp_sizes_enc\": \"" + std::to_string(2 * w) + ",1,1,1\"}"); },
               {"tp_sizes_enc", "galvatron_test_tp_big"});
  expect_error([&] { plugin_for("pp_big", "{\"pp_deg\": " + std::to_string(2 * w) + ", \"tp_sizes_enc\": \"1,1,1,1\"}"); },
               {"pp_deg", "galvatron_test_pp_big"});
  // A layer count other than the model's (checked at boost, on every rank alike).
  expect_error([&] { boost(plugin_for("layers", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1"})")); },
               {"tp_sizes_enc", "galvatron_test_layers", "3 layers", "4 transformer layers"});
  // Unknown keys, wrong kinds, lists of another length, features not implemented.
  expect_error([&] { plugin_for("unknown", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "tp_size_enc": "1"})"); },
               {"unknown key 'tp_size_enc'", "galvatron_test_unknown"});
  expect_error([&] { plugin_for("kind", R"({"pp_deg": "two", "tp_sizes_enc": "1,1,1,1"})"); },
               {"'pp_deg' in", "galvatron_test_kind", "integer"});
  expect_error([&] { plugin_for("length", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "checkpoint": "0,1"})"); },
               {"'checkpoint' in", "2 layers"});
  expect_error([&] { plugin_for("vsp", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "vsp": 2})"); },
               {"'vsp' in", "galvatron_test_vsp", "expected 0 or 1"});
  expect_error([&] { plugin_for("cp", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "cp_sizes_enc": "1,2,1,1"})"); },
               {"'cp_sizes_enc' in", "not implemented"});
  expect_error([&] { plugin_for("sp_value", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "use_sp": "0,2,0,0"})"); },
               {"'use_sp' in", "layer 1 has 2"});
  if (w % 4 == 0) {  // Ulysses scatters the heads: 2 heads do not go over 4 ranks
    expect_error(
        [&] {
          auto c = tiny_config();
          c.num_attention_heads = 2;
          manual_seed(1);
          auto m = std::make_shared<nn::ViTForImageClassification>(c);
          Booster bo(plugin_for("sp_heads", R"({"pp_deg": 1, "tp_sizes_enc": "1,4,1,1", "use_sp": "0,1,0,0"})"));
          bo.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), sgd()));
        },
        {"num_attention_heads 2", "sequence-parallel group of 4"});
  }
  expect_error([&] { plugin_for("json", R"({"pp_deg": 1, "tp_sizes_enc": )"); }, {"galvatron_test_json", "not JSON"});
  expect_error([&] { plugin_for("missing", "", "galvatron_config_path = '/nonexistent/plan.json'\n"); },
               {"/nonexistent/plan.json"});
  expect_error([&] { boost(plugin_for("division", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "pp_division": "3"})")); },
               {"'pp_division' in", "3 layers"});
  expect_error([&] { boost(plugin_for("bsz", "{\"pp_deg\": 1, \"tp_sizes_enc\": \"1,1,1,1\", \"global_bsz\": " +
                                                 std::to_string(w == 1 ? -1 : w + 1) + "}")); },
               {"'global_bsz' in"});
  expect_error([&] { plugin_for("dp_type", R"({"pp_deg": 1, "tp_sizes_enc": "1,1,1,1", "default_dp_type": "zero4"})"); },
               {"default_dp_type", "zero4"});
  if (w % 2 == 0)
    expect_error([&] { plugin_for("chunks", R"({"pp_deg": 2, "tp_sizes_enc": "1,1,1,1", "chunks": 1})"); },
                 {"'chunks' in", "galvatron_test_chunks", "pipeline stages"});
  // Global-mode arguments under their [plugin] names.
  expect_error([&] { plugin_for("global", "", "global_tp_deg = 3\n"); }, {"global_tp_deg"});
  expect_error([&] { plugin_for("global2", "", "pipeline_type = '1f1b'\n"); }, {"pipeline_type"});
  expect_error([&] { plugin_for("global3", "", "tp_size = 2\n"); }, {"unknown key 'plugin.tp_size'"});
}

// Under vsp the embeddings and the head run whole on every rank of their group, on the
// same rows: their dropout draws the same mask on each (the default generators here differ
// by rank), so the group's copies agree.
TEST(Galvatron, VocabUlyssesDrawsOneDropoutStreamAGroup) {
  if (dist::world_size() % 2) GTEST_SKIP() << "a group of 2";
  auto c = tiny_config();
  c.hidden_dropout_prob = 0.5;
  manual_seed(3);
  auto m = std::make_shared<nn::ViTForImageClassification>(c);
  const Tensor x = global_batch(0, 2).first;
  auto plugin = plugin_for("vsp_dropout", "", "global_tp_deg = 2\nuse_ulysses = true\nvocab_tp = 2\nvocab_sp = true\n");
  Booster bo(plugin);
  bo.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), sgd()));
  auto emb = std::dynamic_pointer_cast<nn::UnaryModule>(m->get("vit.embeddings"));
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(m->get("vit.embeddings.dropout")->type_name(), "DropoutForReplicatedInput");
  manual_seed(9, uint64_t(dist::world_rank()));
  m->train();
  const double sum = booster::sum((*emb)(x)).item();
  const auto& g = dynamic_cast<const plugins::GalvatronPlugin&>(*plugin).groups().tp({2, true});
  EXPECT_EQ(dist::all_reduce_scalar(sum, dist::ReduceOp::max, g), dist::all_reduce_scalar(sum, dist::ReduceOp::min, g));
}

}  // namespace

namespace {

namespace gv = booster::galvatron;

// Profiles of a made-up machine and model: communication free (so the dynamic program's
// objective and the cost model's step agree exactly), compute halving with tp.
gv::CostModel free_comm_model(int world) {
  gv::HardwareProfile h;
  for (int n = 2; n <= world; n *= 2)
    for (int c : {0, 1}) h.allreduce_busbw["allreduce_size_" + std::to_string(n) + "_consec_" + std::to_string(c)] = 1e12;
  h.p2p_bw[1] = 1e12;
  gv::ModelProfile m;
  m.model = "made_up", m.precision = "fp32", m.seq = 50, m.hidden = 64, m.profiled_batch = 8;
  m.fwd_ms_per_sample = {{1, 1.0}, {2, 0.6}, {4, 0.35}};
  m.act_mb_per_sample = {{1, 4.0}, {2, 2.2}, {4, 1.3}};
  m.checkpoint_act_mb_per_sample = 0.2;
  // Ulysses: faster than tensor parallelism here (no search takes it unless asked to).
  m.sp_fwd_ms_per_sample = {{2, 0.4}, {4, 0.17}}, m.sp_fwd_bwd_ms_per_sample = {{2, 1.2}, {4, 0.5}};
  m.sp_act_mb_per_sample = {{2, 2.0}, {4, 1.0}};
  m.param_count = 2e6, m.other_param_count = 1e5, m.other_fwd_ms_per_sample = 0.1, m.other_act_mb_per_sample = 0.5;
  m.runtime_mb = 10;
  return gv::CostModel(h, m, world, "fp32");
}

}  // namespace

TEST(GalvatronSearch, DynamicProgramFindsANearBestPlanUnderTheBudget) {
  const int world = 4;
  const gv::CostModel cm = free_comm_model(world);
  gv::SearchOptions o;
  o.num_layers = 3, o.global_bsz = 8, o.max_pp = 1, o.vtp = false, o.memory_step_mb = 0.25;
  // Plain data parallelism needs (4 + 12) B x 2e6 a layer = 31 MB of states; a budget below
  // three such layers rules it out.
  gv::HybridPlan ddp;
  ddp.layers.assign(3, gv::LayerStrategy{});
  ddp.global_bsz = 8;
  const double ddp_mb = cm.cost(ddp).memory_mb;
  o.memory_mb = ddp_mb * 0.6;
  const auto found = gv::search(cm, o);
  ASSERT_FALSE(found.empty());
  ASSERT_TRUE(found.front().fits);
  EXPECT_LE(found.front().cost.memory_mb, o.memory_mb);
  // Brute force over every assignment of strategies to the three layers.
  const auto ss = gv::strategies(world, o);
  double best = 1e300;
  for (auto& a : ss)
    for (auto& b : ss)
      for (auto& c : ss) {
        gv::HybridPlan p = ddp;
        p.layers = {a, b, c};
        const auto cost = cm.cost(p);
        if (cost.memory_mb <= o.memory_mb) best = std::min(best, cost.step_ms);
      }
  // The knapsack's memory is additive over layers, the cost model's peak is not (a layer's
  // backward beside the gradients of the layers after it): the plan it finds fits, and is
  // within 5 % of the best that fits (4.0 % here), never faster than it.
  EXPECT_GE(found.front().cost.step_ms, best - 1e-9 * best);
  EXPECT_LE(found.front().cost.step_ms, 1.05 * best) << found.front().plan.summary(world);
  // Every global plan that fits is no faster than the layerwise one.
  for (auto& g : gv::global_plans(cm, o)) {
    if (g.fits) {
      EXPECT_GE(g.cost.step_ms, found.front().cost.step_ms - 1e-9) << g.plan.summary(world);
    }
  }
}

// The stage partition is searched (Galvatron fixes it beforehand): embeddings as slow as two
// layers make the even split's first stage the pipeline's slowest; one layer fewer there
// balances it.
TEST(GalvatronSearch, StagePartitionIsSearched) {
  const gv::CostModel base = free_comm_model(4);
  gv::ModelProfile m = base.model();
  m.other_fwd_ms_per_sample = 2.0, m.embed_time_share = 1.0;
  const gv::CostModel cm(base.hardware(), m, 4, "fp32");
  gv::SearchOptions o;
  o.num_layers = 4, o.global_bsz = 16, o.memory_mb = 1e6, o.vtp = false, o.max_chunks = 4;
  auto pipelined = [&](int64_t spread) {
    o.partition_spread = spread;
    for (auto& c : gv::search(cm, o))
      if (c.plan.pp_deg == 2 && c.plan.chunks == 4) return c;
    ADD_FAILURE() << "no pp 2 plan of 4 micro-batches";
    return gv::Candidate{};
  };
  const auto even = pipelined(0), searched = pipelined(2);
  EXPECT_EQ(even.plan.stage_layers(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(searched.plan.stage_layers(), (std::vector<int64_t>{1, 3})) << searched.plan.summary(4);
  EXPECT_LT(searched.cost.step_ms, even.cost.step_ms);
  EXPECT_NE(searched.plan.summary(4).find("stages 1,3"), std::string::npos) << searched.plan.summary(4);
}

TEST(GalvatronSearch, CostModelCountsWhatTheRuntimeHolds) {
  const gv::CostModel cm = free_comm_model(4);
  gv::HybridPlan p;
  p.layers.assign(4, gv::LayerStrategy{});
  p.global_bsz = 16;
  const double ddp = cm.cost(p).memory_mb;
  for (auto& l : p.layers) l.sdp = true;  // ZeRO-3 over 4 ranks: states / 4
  const double zero3 = cm.cost(p).memory_mb;
  // (less what ZeRO-3 holds gathered at the peak, the last layer's backward beside every
  // activation: that layer and the one prefetched after it, and the gather's input, this
  // rank's quarter of the layer)
  const double layer_mb = 2e6 * 4.0 / (1 << 20);
  EXPECT_NEAR(ddp - zero3, 4 * 2e6 * 16.0 * 0.75 / (1 << 20) - 2 * layer_mb - layer_mb / 4, 1e-6);
  // A unit of the whole model (Gemini's chunk when it holds everything, FSDP without an
  // auto-wrap policy) is held twice while it is gathered, beside its quarter sent.
  gv::CostModel whole = cm;
  whole.set_zero3_unit(4 * 2e6 + 1e5);
  const auto unit = whole.cost(p).stages[0].parts, layer = cm.cost(p).stages[0].parts;
  const double model_mb = (4 * 2e6 + 1e5) * 4.0 / (1 << 20);
  EXPECT_NEAR(unit.params - layer.params, 2 * (model_mb - layer_mb), 1e-6);
  EXPECT_NEAR(unit.communication - layer.communication, (model_mb - layer_mb) / 4, 1e-6);
  whole.set_zero3_unit(1e3);  // a unit smaller than a layer: the layer
  EXPECT_NEAR(whole.cost(p).memory_mb, zero3, 1e-9);
  // GPipe keeps every micro-batch's activations, 1F1B at most p - k on stage k.
  gv::HybridPlan pipe;
  pipe.pp_deg = 2, pipe.chunks = 4, pipe.global_bsz = 16;
  pipe.layers.assign(4, gv::LayerStrategy{});
  const double f1b = cm.cost(pipe).stages[0].memory_mb;
  pipe.pipeline_type = "gpipe";
  const double gpipe = cm.cost(pipe).stages[0].memory_mb;
  // Two layers and half the embeddings-and-head share, a micro-batch's 4 rows over 2 data-parallel ranks.
  const double act_stage0 = (2 * 4.0 + 0.5 * 0.5) * (16 / 4 / 2);
  // 1F1B's forwards after the first backward run beside the gradients accumulating over the
  // micro-batches (the pipeline defers their reduction): both layers' whole, 4 B a parameter.
  const double grads_stage0 = 2 * 2e6 * 4.0 / (1 << 20);
  EXPECT_NEAR(gpipe - f1b, act_stage0 * (4 - 2) - grads_stage0, 1e-6);
}

TEST(GalvatronSearch, BackwardPeakIsTheLayerWhoseWorkingSetMeetsMostHeld) {
  // Two layers kept whole, then two checkpointed (recompute 3 MB a row), DDP over 4 ranks,
  // 4 rows a rank. Layer l's backward holds the activations of the layers before it, its own
  // working set and the gradients after it (staged, with the ring's receive block: 1 + 1/4).
  gv::CostModel cm = free_comm_model(4);
  gv::ModelProfile m = cm.model();
  m.checkpoint_backward_mb_per_sample = 3.0;
  cm = gv::CostModel(cm.hardware(), m, 4, "fp32");
  gv::HybridPlan p;
  p.layers.assign(4, gv::LayerStrategy{});
  p.layers[2].checkpoint = p.layers[3].checkpoint = true;
  p.global_bsz = 16;
  const double MB = 1 << 20, rows = 4, whole = 2e6 * 4 / MB, grad = whole * 1.25;
  const double states = (4 * 2e6 + 1e5) * 16 / MB, other_grads = 1e5 * 4 / MB * 1.25, embed_acts = 0.5 * rows;
  const double act = 4.0 * rows, recompute = 3.0 * rows;
  const double at_layer1 = embed_acts + act + (act + whole) + 2 * grad;  // more than at layers 0, 2 (act + act + recompute + grad), 3
  ASSERT_GT(at_layer1, embed_acts + 2 * act + recompute + grad);
  const auto c = cm.cost(p);
  EXPECT_NEAR(c.stages[0].backward_mb, m.runtime_mb + states + at_layer1 + other_grads, 1e-9);
  EXPECT_NEAR(c.memory_mb, c.stages[0].backward_mb, 1e-9);  // above the forward's end (every activation and a gradient)
  // A larger recompute moves the peak to the first checkpointed layer, beside both whole layers' activations.
  m.checkpoint_backward_mb_per_sample = 6.0;
  const auto c2 = gv::CostModel(cm.hardware(), m, 4, "fp32").cost(p);
  EXPECT_NEAR(c2.stages[0].backward_mb, m.runtime_mb + states + embed_acts + 2 * act + 6.0 * rows + grad + other_grads, 1e-9);
  // The all-reduce receives a round in pieces: where a piece is smaller than the round's
  // block, a reduction in flight holds one piece beside its staged gradient.
  dist::set_ring_piece_elements(1000);
  const auto c3 = cm.cost(p);
  dist::set_ring_piece_elements(dist::kRingPieceDefault);
  const double piece = 1000 * 4 / MB;
  EXPECT_NEAR(c3.stages[0].backward_mb,
              m.runtime_mb + states + embed_acts + act + (act + whole) + 2 * (whole + piece) + 1e5 * 4 / MB + piece, 1e-9);
}

// A pipeline's first stage holds the embeddings' share of the embeddings' and head's
// parameters and activations (profiled), its last stage the rest; one stage holds all of it.
TEST(GalvatronSearch, StagesHoldTheirShareOfTheEmbeddingsAndHead) {
  const gv::CostModel cm = free_comm_model(4);
  gv::HybridPlan plan;
  plan.layers.assign(4, gv::LayerStrategy{});
  plan.global_bsz = 16, plan.chunks = 4, plan.pipeline_type = "gpipe";
  auto cost = [&](double param_share, double act_share, int pp) {
    gv::ModelProfile m = cm.model();
    m.embed_param_share = param_share, m.embed_act_share = act_share;
    plan.pp_deg = pp;
    return gv::CostModel(cm.hardware(), m, 4, "fp32").cost(plan);
  };
  const auto half = cost(0.5, 0.5, 2), embed = cost(1.0, 1.0, 2);
  EXPECT_GT(embed.stages[0].memory_mb, half.stages[0].memory_mb);
  EXPECT_LT(embed.stages[1].memory_mb, half.stages[1].memory_mb);
  // Each part moves on its own: the parameters' states, and the activations GPipe's first
  // stage keeps for every micro-batch.
  EXPECT_GT(cost(1.0, 0.5, 2).stages[0].memory_mb, half.stages[0].memory_mb);
  EXPECT_GT(cost(0.5, 1.0, 2).stages[0].memory_mb, half.stages[0].memory_mb);
  EXPECT_NEAR(cost(1.0, 1.0, 1).memory_mb, cost(0.5, 0.5, 1).memory_mb, 1e-9);
}

TEST(GalvatronSearch, ProfilesReadBackInGalvatronsFormat) {
  const auto dir = std::filesystem::temp_directory_path() / ("galvatron_profiles_" + std::to_string(dist::world_rank()));
  gv::HardwareProfile h;
  h.allreduce_busbw = {{"allreduce_size_2_consec_1", 3.5}, {"allreduce_size_2_consec_0", 2.5}};
  h.p2p_bw = {{1, 4.0}, {2, 3.0}};
  h.overlap_coe = 1.4;
  h.write(dir.string(), 1, 2);
  const auto h2 = gv::HardwareProfile::read(dir.string(), 1, 2);
  EXPECT_EQ(h2.allreduce_busbw, h.allreduce_busbw);
  EXPECT_EQ(h2.p2p_bw, h.p2p_bw);
  EXPECT_DOUBLE_EQ(h2.overlap_coe, 1.4);
  EXPECT_NEAR(h2.allreduce_ms(100, 2, true), 100 * 1.0 / 3.5, 1e-12);
  EXPECT_TRUE(std::filesystem::exists(dir / "allreduce_bandwidth_1nodes_2gpus_per_node.json"));
  gv::ModelProfile m = free_comm_model(4).model();
  m.sequence_parallel = true;
  m.write(dir.string());
  const auto m2 = gv::ModelProfile::read(dir.string(), "fp32", "made_up");
  EXPECT_EQ(m2.fwd_ms_per_sample, m.fwd_ms_per_sample);
  EXPECT_EQ(m2.act_mb_per_sample, m.act_mb_per_sample);
  EXPECT_EQ(m2.sp_fwd_ms_per_sample, m.sp_fwd_ms_per_sample);
  EXPECT_EQ(m2.sp_fwd_bwd_ms_per_sample, m.sp_fwd_bwd_ms_per_sample);
  EXPECT_EQ(m2.sp_act_mb_per_sample, m.sp_act_mb_per_sample);
  EXPECT_TRUE(m2.sequence_parallel);
  EXPECT_DOUBLE_EQ(m2.runtime_mb, m.runtime_mb);
  EXPECT_TRUE(std::filesystem::exists(dir / "computation_profiling_fp32_made_up.json"));
  std::filesystem::remove_all(dir);
}

// A Ulysses layer keeps whole weights (ZeRO over the whole stage), holds its share of the
// tokens' activations and runs at its profiled Ulysses time; the search weighs it only
// where --sp-space says, and takes it where it is faster.
TEST(GalvatronSearch, UlyssesLayersAreCostedWholeOverTheStage) {
  const gv::CostModel cm = free_comm_model(4);
  gv::HybridPlan p;
  p.layers.assign(4, gv::LayerStrategy{});
  p.global_bsz = 16;
  const gv::LayerStrategy ddp{}, sp2{2, true, false, false, true}, tp2{2, true, false, false, false};
  const gv::LayerStrategy sp2_sdp{2, true, true, false, true}, ddp_sdp{1, true, true, false, false};
  EXPECT_DOUBLE_EQ(cm.layer_states_mb(p, sp2, 4), cm.layer_states_mb(p, ddp, 4));
  EXPECT_DOUBLE_EQ(cm.layer_states_mb(p, tp2, 4) * 2, cm.layer_states_mb(p, ddp, 4));
  EXPECT_DOUBLE_EQ(cm.layer_states_mb(p, sp2_sdp, 4), cm.layer_states_mb(p, ddp_sdp, 4));  // ZeRO-3 over all 4
  // 16 rows over 2 slices: 8 rows a rank, each of half the tokens.
  EXPECT_DOUBLE_EQ(cm.layer_act_mb(sp2, 4, 16), 8 * 2.0);
  EXPECT_DOUBLE_EQ(cm.layer_act_mb({2, true, false, true, true}, 4, 16), 8 * 0.2 / 2);  // checkpointed: its token shard
  EXPECT_DOUBLE_EQ(cm.layer_ms(p, sp2, 4, 16, nullptr), 8 * 1.2);
  EXPECT_DOUBLE_EQ(cm.layer_ms(p, {2, true, false, true, true}, 4, 16, nullptr), 8 * (1.2 + 0.4));
  gv::SearchOptions o;
  o.num_layers = 3, o.global_bsz = 16, o.memory_mb = 1e6, o.max_pp = 1, o.vtp = false;
  auto count = [&](bool sp) {
    int n = 0;
    for (auto& s : gv::strategies(4, o)) n += s.ulysses() == sp && s.tp > 1;
    return n;
  };
  EXPECT_EQ(count(true), 0);  // the default: tensor parallelism only
  o.sp_space = "sp";
  EXPECT_GT(count(true), 0);
  EXPECT_EQ(count(false), 0);
  o.sp_space = "tp+sp";
  // Both; Ulysses 4 also with ZeRO-3 (over the stage), which tensor parallelism 4 leaves no room for.
  EXPECT_EQ(count(true), count(false) + 2);
  // Per row a rank: DDP 3 x 1.0 ms a sample over 4 rows, Ulysses 4 0.5 over 16: every layer Ulysses 4.
  const auto found = gv::search(cm, o);
  ASSERT_FALSE(found.empty());
  for (auto& l : found.front().plan.layers) EXPECT_TRUE(l.ulysses() && l.tp == 4) << found.front().plan.summary(4);
  EXPECT_NE(found.front().plan.to_json().find("\"use_sp\": \"1,1,1\""), std::string::npos);
}

// vsp: the embeddings and head whole (data parallel over the stage) on the group's rows; the
// search weighs it where sp_space allows Ulysses.
TEST(GalvatronSearch, VocabUlyssesIsCostedWholeAndSearchedWithSp) {
  const gv::CostModel cm = free_comm_model(4);
  gv::HybridPlan p;
  p.layers.assign(4, gv::LayerStrategy{2, true, false, false, true});
  p.global_bsz = 16, p.vtp = 2;
  const double tp = cm.cost(p).memory_mb;
  p.vsp = true;
  const double sp = cm.cost(p).memory_mb;
  p.vtp = 1, p.vsp = false;
  EXPECT_GT(sp, tp);  // whole weights against halves
  EXPECT_GT(sp, cm.cost(p).memory_mb);  // the same weights, twice the rows a rank
  gv::SearchOptions o;
  o.num_layers = 4, o.global_bsz = 16, o.memory_mb = 1e6, o.max_pp = 1;
  auto vsp_seen = [&] {
    bool any = false;
    for (auto& c : gv::global_plans(cm, o)) any = any || (c.plan.vsp && c.plan.vtp > 1);
    return any;
  };
  EXPECT_FALSE(vsp_seen());
  o.sp_space = "tp+sp";
  EXPECT_TRUE(vsp_seen());
  for (auto& c : gv::global_plans(cm, o)) {  // vocab Ulysses beside Ulysses layers of its degree
    if (c.plan.vsp) {
      EXPECT_TRUE(c.plan.layers[0].ulysses() && c.plan.layers[0].tp == c.plan.vtp) << c.plan.summary(4);
    }
  }
}

namespace {
// Token-split layers of one group hand the tokens on split: a run gathers them once, where
// it ends (the profiled layer time has no gather); Megatron-SP's tp layers are such layers
// when the profile says so, plain tp layers are not.
TEST(GalvatronSearch, TokenSplitRunsGatherWhereTheyEnd) {
  gv::HardwareProfile h = free_comm_model(4).hardware();
  for (auto& [k, v] : h.allreduce_busbw) v = 1.0;
  gv::ModelProfile m = free_comm_model(4).model();
  const gv::CostModel cm(h, m, 4, "fp32");
  const gv::LayerStrategy sp2{2, true, false, false, true}, sp2_ckpt{2, true, false, true, true};
  const gv::LayerStrategy sp4{4, true, false, false, true}, tp2{2, true, false, false, false}, ddp{};
  EXPECT_EQ(cm.switch_ms(sp2, sp2_ckpt, 4, 16), 0);  // one run
  const double end = cm.switch_ms(sp2, tp2, 4, 16);  // same rows, the tokens gathered
  EXPECT_GT(end, 0);
  EXPECT_GT(cm.switch_ms(sp2, sp4, 4, 16), 0);
  EXPECT_EQ(cm.switch_ms(tp2, sp2, 4, 16), 0);  // a run begins with a slice
  EXPECT_EQ(cm.switch_ms(sp2, gv::CostModel::edge(gv::HybridPlan{}), 4, 16), cm.switch_ms(sp2, ddp, 4, 16));
  m.sequence_parallel = true;
  const gv::CostModel megatron(h, m, 4, "fp32");
  EXPECT_EQ(megatron.switch_ms(sp2, tp2, 4, 16), 0);  // Ulysses into Megatron-SP over the same group
  EXPECT_DOUBLE_EQ(megatron.switch_ms(tp2, ddp, 4, 16), end);
  // A plan pays one gather a run: four Ulysses layers cost their layers and one end.
  gv::HybridPlan p;
  p.layers.assign(4, sp2);
  p.global_bsz = 16;
  double layers = 0;
  for (auto& l : p.layers) layers += cm.layer_ms(p, l, 4, 16, nullptr);
  gv::HybridPlan q = p;
  q.layers = {sp2, tp2, sp2, tp2};  // two runs: two ends
  double q_layers = 0;
  for (auto& l : q.layers) q_layers += cm.layer_ms(q, l, 4, 16, nullptr);
  EXPECT_NEAR(cm.cost(q).stages[0].fwd_bwd_ms - q_layers - (cm.cost(p).stages[0].fwd_bwd_ms - layers), end, 1e-9);
}
}  // namespace
