// The plugin conformance suite: every plugin configuration in kCases must pass. Adding a
// plugin means adding lines to kCases. Runs under mpirun -np 1, 2, 4, and the grid cases at 8,
// on the tiny ViT, and on GPT-2 and LLaMA (conformance_model.h) where a case needs no
// tensor-parallel policy.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/lazy.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "booster/checkpoint/reader.h"
#include "booster/mixed_precision.h"
#include "plugins/registry.h"
#include "plugins/torch_ddp/torch_ddp_plugin.h"
#include "tests/plugins/conformance_model.h"
#include "tests/support/logical.h"

using namespace booster;
using namespace booster::plugin_tests;

namespace {

struct PluginCase {
  std::string name;
  std::string toml;  // the [plugin] table; empty: Booster without plugin
  int tp = 1;        // tensor-parallel size
  int pp = 1;        // pipeline stages (training runs through execute_pipeline)
  bool split = false;  // Booster split_batch: each of 2 threads runs a share of the rank's batch
  int ranks = 0;       // the world must be a multiple of this (0: of group())
  std::string plan = {};  // a Galvatron strategy JSON (written for the case, its path added to the table)
  int64_t rows = 2;       // a replica's rows per step (a grid splits them into its row blocks)
  bool language_only = false;  // sequence parallelism across pipeline stages: the language models' token split
  /// Ranks of one data-parallel replica (they see the same rows; Ulysses' sp ranks too).
  int group() const { return tp * pp; }
};

const std::string kHybrid = "[plugin]\nname = 'hybrid_parallel'\ntp_size = 2\nprecision = 'fp32'\n";
// Chunks of 4096 elements (search from 0.002 M, 0.004 M range, step 1024): several chunks in the tiny ViT.
const std::string kGemini = "[plugin]\nname = 'gemini'\nprecision = 'fp32'\nmin_chunk_size_m = 0.002\n"
                            "search_range_m = 0.004\nenable_gradient_accumulation = true\n";
const std::string kPipeline = "[plugin]\nname = 'hybrid_parallel'\npp_size = 2\nprecision = 'fp32'\n";
const std::string kUlysses = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\nenable_sequence_parallelism = true\n"
                             "sequence_parallelism_mode = 'all_to_all'\nsp_size = 2\n";

const std::string kRing = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\nenable_sequence_parallelism = true\n"
                          "sequence_parallelism_mode = 'ring_attn'\nsp_size = 2\n";

const std::string kGalvatron = "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\n";
// Layerwise plans of the tiny ViT's 4 layers: every kind of layer next to another kind.
const std::string kMixedPlan = R"({"pp_deg": 1, "tp_sizes_enc": "2,2,1,1", "tp_consecutive_flags": "1,0,1,1",
  "dp_types_enc": "0,0,1,0", "checkpoint": "0,0,0,1", "global_bsz": 8, "chunks": 1, "pipeline_type": "pipedream_flush",
  "default_dp_type": "ddp", "vtp": 1, "vsp": 0, "embed_sdp": 0})";
// Ulysses beside tensor parallelism: sp 2 strided (DDP over the stage, checkpointed), sp 4
// (ZeRO-3), tp 2, DDP; the tiny ViT's 5 tokens split 3/2 and 2/1/1/1.
const std::string kMixedPlanUlysses = R"({"pp_deg": 1, "tp_sizes_enc": "2,4,2,1", "tp_consecutive_flags": "0,1,1,1",
  "use_sp": "1,1,0,0", "dp_types_enc": "0,1,0,0", "checkpoint": "1,0,0,0", "global_bsz": 8, "default_dp_type": "ddp",
  "vtp": 1})";
// Token-split runs under vsp (the embeddings and head whole on pairs) with Megatron-SP:
// Ulysses 2 checkpointed, Ulysses 2 under ZeRO-3, tp 2 (one run of one group, the tokens
// handed on split), Ulysses 4 (another group: gathered, split again).
const std::string kMixedPlanSplitChains = R"({"pp_deg": 1, "tp_sizes_enc": "2,2,2,4", "tp_consecutive_flags": "1,1,1,1",
  "use_sp": "1,1,0,1", "dp_types_enc": "0,1,0,0", "checkpoint": "1,0,0,0", "global_bsz": 4, "default_dp_type": "ddp",
  "vtp": 2, "vsp": 1})";
const std::string kMixedPlanVtp2 = R"({"pp_deg": 1, "tp_sizes_enc": "1,4,2,2", "tp_consecutive_flags": "1,1,0,1",
  "dp_types_enc": "0,0,1,0", "checkpoint": "1,0,0,0", "global_bsz": 4, "chunks": 1, "default_dp_type": "zero2",
  "vtp": 2, "embed_sdp": 1})";

// 2D, 2.5D and 3D tensor parallelism (legacy Colossal-AI's modes): a 2 x 2 grid (np 4; at
// np 8 beside data parallelism), a 2 x 2 x depth 2 grid and a 2 x 2 x 2 cube (np 8).
const std::string kGrid2d = "[plugin]\nname = 'hybrid_parallel'\ntp_size = 4\ntp_mode = '2d'\nprecision = 'fp32'\n";
const std::string kGrid8 = "[plugin]\nname = 'hybrid_parallel'\ntp_size = 8\nprecision = 'fp32'\n";

const std::vector<PluginCase> kCases = {
    {"no_plugin", ""},
    {"torch_ddp", "[plugin]\nname = 'torch_ddp'\n"},
    {"torch_ddp_many_buckets", "[plugin]\nname = 'torch_ddp'\nbucket_cap_mb = 0.01\n"},
    {"torch_ddp_bucket_view", "[plugin]\nname = 'torch_ddp'\ngradient_as_bucket_view = true\n"},
    {"zero1", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\n"},
    {"zero1_no_overlap", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\noverlap_communication = false\n"},
    {"zero2", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n"},
    {"zero2_no_overlap", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\noverlap_communication = false\n"},
    {"zero2_small_buckets", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\nreduce_bucket_size_in_m = 0.002\n"},
    {"no_plugin_split", "", 1, 1, true},
    {"torch_ddp_split", "[plugin]\nname = 'torch_ddp'\n", 1, 1, true},
    {"zero2_split", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n", 1, 1, true},
    {"zero2_offload", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\ncpu_offload = true\n"},
    {"zero1_offload", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\ncpu_offload = true\n"},
    {"tp2", kHybrid, 2},
    {"tp2_zero1", kHybrid + "zero_stage = 1\n", 2},
    {"tp2_zero2", kHybrid + "zero_stage = 2\n", 2},
    {"tp2_zero2_no_overlap", kHybrid + "zero_stage = 2\noverlap_communication = false\n", 2},
    {"tp2_sequence_parallel", kHybrid + "enable_sequence_parallelism = true\n", 2},
    // Ulysses (all_to_all) over an sp axis of 2, its ranks data parallel too (the case's "tp": ranks that see the same rows).
    {"sp2_all_to_all", kUlysses, 2},
    {"sp2_all_to_all_zero2", kUlysses + "zero_stage = 2\n", 2},
    {"tp2_sequence_parallel_pp2", kPipeline + "tp_size = 2\nenable_sequence_parallelism = true\nnum_microbatches = 2\n", 2,
     2, false, 0, "", 2, true},
    {"sp2_all_to_all_pp2", kUlysses + "pp_size = 2\nnum_microbatches = 2\n", 2, 2, false, 0, "", 2, true},
    // split_gather overlapped (ring; the same by enable_sequence_overlap): language models (the ViT refuses it).
    {"tp2_ring", kHybrid + "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'ring'\n", 2, 1, false, 0, "",
     2, true},
    {"tp2_sequence_overlap", kHybrid + "enable_sequence_parallelism = true\nenable_sequence_overlap = true\nzero_stage = 2\n",
     2, 1, false, 0, "", 2, true},
    {"tp2_ring_pp2", kPipeline + "tp_size = 2\nenable_sequence_parallelism = true\nsequence_parallelism_mode = 'ring'\n"
     "num_microbatches = 2\n", 2, 2, false, 0, "", 2, true},
    // Ring attention (ring_attn) over an sp axis of 2: zigzag token shards, causal language models only.
    {"sp2_ring_attn", kRing, 2, 1, false, 0, "", 2, true},
    {"sp2_ring_attn_zero2", kRing + "zero_stage = 2\n", 2, 1, false, 0, "", 2, true},
    {"sp2_ring_attn_pp2", kRing + "pp_size = 2\nnum_microbatches = 2\n", 2, 2, false, 0, "", 2, true},
    // Whole logits out of a vocabulary-parallel head (parallel_output = false; the ViT's classifier gathers anyway).
    {"tp2_gathered_logits", kHybrid + "parallel_output = false\nmake_vocab_size_divisible_by = 1\n", 2},
    {"pp2_1f1b", kPipeline + "num_microbatches = 2\n", 1, 2},
    {"pp2_interleaved", kPipeline + "pp_style = 'interleaved'\nnum_model_chunks = 2\nnum_microbatches = 2\n", 1, 2},
    // Zero bubble V: backwards split into B and W, the order simulated from the measured costs.
    {"pp2_zbv", kPipeline + "pp_style = 'zbv'\nnum_model_chunks = 2\nnum_microbatches = 2\n", 1, 2},
    {"pp2_balanced_no_overlap", kPipeline + "microbatch_size = 1\npartition_method = 'balanced'\noverlap_p2p = false\n"
                                "enable_metadata_cache = false\n", 1, 2},
    {"tp2_pp2", kPipeline + "tp_size = 2\nnum_microbatches = 2\n", 2, 2},
    {"pp2_zero1", kPipeline + "zero_stage = 1\nnum_microbatches = 2\n", 1, 2},
    {"pp2_zero2", kPipeline + "zero_stage = 2\nnum_microbatches = 2\n", 1, 2},
    {"fsdp_full_shard", "[plugin]\nname = 'torch_fsdp'\nauto_wrap_policy = 'transformer'\n"},
    {"fsdp_shard_grad_op", "[plugin]\nname = 'torch_fsdp'\nsharding_strategy = 'SHARD_GRAD_OP'\n"},
    {"fsdp_no_shard", "[plugin]\nname = 'torch_fsdp'\nsharding_strategy = 'NO_SHARD'\n"},
    {"gemini", kGemini + "max_prefetch = 2\n"},
    {"gemini_half_sharded", kGemini + "shard_param_frac = 0.5\noffload_optim_frac = 0.5\n"},
    {"gemini_unsharded_sync", kGemini + "shard_param_frac = 0.0\nenable_async_reduce = false\n"},
    {"gemini_offload_all", kGemini + "offload_optim_frac = 1.0\noffload_param_frac = 1.0\n"},
    // auto: the warm-up keeps every chunk on disk, then they move into RAM (the cap is RAM).
    {"gemini_auto", kGemini + "placement_policy = 'auto'\nwarmup_non_model_data_ratio = 1.0\n"},
    {"galvatron_ddp", kGalvatron},
    {"galvatron_sdp_checkpoint", kGalvatron + "sdp = true\nglobal_checkpoint = true\n"},
    // Galvatron's pipeline: 2 stages of the plan, each stage's ranks data parallel (np 4: dp 2 a stage).
    {"galvatron_pp2", kGalvatron + "pp_deg = 2\nchunks = 2\n", 1, 2},
    {"galvatron_tp2_strided_zero2", kGalvatron + "global_tp_deg = 2\nglobal_tp_consec = false\ndefault_dp_type = 'zero2'\n",
     1, 1, false, 2},
    {"galvatron_mixed", kGalvatron, 1, 1, false, 4, kMixedPlan},
    {"galvatron_mixed_vtp2", kGalvatron, 2, 1, false, 4, kMixedPlanVtp2},
    {"galvatron_ulysses2_zero2", kGalvatron + "global_tp_deg = 2\nuse_ulysses = true\ndefault_dp_type = 'zero2'\n", 1, 1,
     false, 2},
    {"galvatron_mixed_ulysses", kGalvatron, 1, 1, false, 4, kMixedPlanUlysses},
    {"galvatron_ulysses2_vsp", kGalvatron + "global_tp_deg = 2\nuse_ulysses = true\nvocab_tp = 2\nvocab_sp = true\n"
     "default_dp_type = 'zero2'\n", 2},
    {"galvatron_mixed_split_chains_vsp", kGalvatron + "sequence_parallel = true\n", 2, 1, false, 4, kMixedPlanSplitChains},
    // Megatron's sequence parallelism in the tensor-parallel layers (Galvatron's --sequence-parallel).
    {"galvatron_tp2_megatron_sp", kGalvatron + "global_tp_deg = 2\nsequence_parallel = true\n", 1, 1, false, 2},
    {"galvatron_mixed_megatron_sp", kGalvatron + "sequence_parallel = true\n", 1, 1, false, 4, kMixedPlan},
    {"grid_2d", kGrid2d, 4},
    {"grid_2d_zero2", kGrid2d + "zero_stage = 2\n", 4},
    {"grid_2d_pp2", kGrid2d + "pp_size = 2\nnum_microbatches = 2\n", 4, 2, false, 0, "", 4},
    {"grid_2p5d", kGrid8 + "tp_mode = '2.5d'\ntp_depth = 2\n", 8, 1, false, 0, "", 4},
    {"grid_3d", kGrid8 + "tp_mode = '3d'\n", 8, 1, false, 0, "", 4},
};

// The cases this binary's model runs: all for the ViT; for the language models one of each
// plugin's kinds (the engine's options are the ViT's to test), tensor parallelism with its
// vocabulary-parallel head, without pipelines for GPT-2, whose head is tied.
const std::vector<std::string> kLanguageModelCases = {
    "no_plugin", "torch_ddp", "torch_ddp_split", "zero1", "zero2", "zero2_split", "zero2_offload", "pp2_1f1b",
    "pp2_interleaved", "pp2_zbv", "pp2_zero1", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_no_shard", "gemini",
    "gemini_offload_all", "galvatron_ddp", "galvatron_sdp_checkpoint", "tp2", "tp2_zero2", "tp2_pp2",
    "tp2_gathered_logits", "pp2_zero2", "tp2_sequence_parallel", "sp2_all_to_all", "sp2_all_to_all_zero2",
    "tp2_sequence_parallel_pp2", "sp2_all_to_all_pp2", "galvatron_tp2_strided_zero2", "galvatron_ulysses2_zero2",
    "galvatron_tp2_megatron_sp", "galvatron_mixed", "galvatron_pp2", "sp2_ring_attn", "sp2_ring_attn_zero2",
    "sp2_ring_attn_pp2", "tp2_ring", "tp2_sequence_overlap", "tp2_ring_pp2"};

const std::vector<PluginCase>& conf_cases() {
  static const std::vector<PluginCase> cases = [] {
    std::vector<PluginCase> out;
    for (const auto& c : kCases) {
      const bool listed = std::find(kLanguageModelCases.begin(), kLanguageModelCases.end(), c.name) != kLanguageModelCases.end();
      if (kConfTensorParallel ? !c.language_only : listed && (kConfPipelines || c.pp == 1)) out.push_back(c);
    }
    return out;
  }();
  return cases;
}

// At 8 ranks (the grids' run) a checkpoint loads into the grids and one case of each other kind.
// A language model's checkpoint loads into one case of each kind at any world size.
bool loads_here(const PluginCase& c) {
  if (!kConfTensorParallel) {
    for (const char* n : {"no_plugin", "torch_ddp", "zero2_offload", "pp2_1f1b", "gemini", "fsdp_full_shard", "galvatron_ddp",
                          "tp2", "sp2_all_to_all", "sp2_ring_attn"})
      if (c.name == n) return true;
    return false;
  }
  if (dist::world_size() < 8 || c.name.rfind("grid", 0) == 0) return true;
  for (const char* n : {"torch_ddp", "zero2", "tp2_pp2", "pp2_1f1b", "gemini", "fsdp_full_shard", "galvatron_mixed"})
    if (c.name == n) return true;
  return false;
}

// Whether a configuration runs at this world size.
bool runs_here(const PluginCase& c) { return dist::world_size() % (c.ranks ? c.ranks : c.group()) == 0; }


std::shared_ptr<Plugin> make(const PluginCase& c) {
  if (c.toml.empty()) return nullptr;
  std::string toml = c.toml;
  if (!c.plan.empty())  // each rank reads its own copy
    toml += "galvatron_config_path = '" + write_process_file("galvatron_" + c.name, c.plan) + "'\n";
  return plugins::make_plugin(Config::from_string(toml, c.name + ".toml"));
}

// The case's booster: its plugin, and split_batch where the case asks.
Booster booster_for(const PluginCase& c) { return Booster(make(c), "", c.split); }

// One training step's forward and backward of a replica's rows: through the model, or
// through execute_pipeline (with a pipeline, or when `via_pipeline` asks; return_outputs:
// the logits on the last stage). Returns the loss where this rank has it (a pipeline's last
// stage; undefined elsewhere).
Tensor forward_backward(Booster& bo, BoostResult<ConfModel>& r, const Tensor& x, const Tensor& y,
                        double loss_scale = 1.0, Tensor* logits = nullptr, bool via_pipeline = false) {
  if (!via_pipeline && (!bo.plugin() || !bo.plugin()->support_pipeline())) {
    auto out = (*r.model)(x, y);
    if (bo.split_batch()) {  // it ran as shares: the loss is their node's
      EXPECT_EQ(out.loss.impl()->grad_fn->name(), "split_batch");
    }
    if (logits) *logits = out.logits;
    Tensor loss = scale(out.loss, loss_scale);
    bo.backward(loss, *r.optimizer);
    return loss.detach();
  }
  nn::Module& m = *r.model->module();
  StageCriterion ce = [loss_scale, &m](const TensorMap& out, const TensorMap& batch) {
    return scale(conf_loss(m, out.at("logits"), batch.at("labels")), loss_scale);
  };
  PipelineResult res = bo.execute_pipeline(single_batch({{kConfInput, x}, {"labels", y}}), *r.model, ce, r.optimizer.get(), true, logits != nullptr);
  if (!res.loss.defined()) return Tensor();
  if (logits) *logits = res.outputs.at("logits");
  return res.loss;
}

// max |a - b| <= tol * max|b| for every parameter of the model, as each boosted model holds
// it for checkpoints (tensor-parallel shards, pipeline stages' parameters, ZeRO and Gemini
// master ranges compared as the logical tensors they are part of).
void expect_params_close(ModelWrapper& got, ModelWrapper& want, double tol, const std::string& what) {
  static const auto names = [] {
    std::vector<std::string> out;
    for (auto& [n, p] : conf_model()->named_parameters()) out.push_back(n);
    return out;
  }();
  const ShardedState g = got.checkpoint_state(), w = want.checkpoint_state();
  for (auto& n : names) {
    auto a = testkit::logical_state(g, n).to_vector(), b = testkit::logical_state(w, n).to_vector();
    ASSERT_EQ(a.size(), b.size()) << what << ": parameter " << n;
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double(std::abs(b[i])));
      err = std::max(err, double(std::abs(a[i] - b[i])));
    }
    EXPECT_LE(err, tol * scale) << what << ": parameter " << n << " differs by " << err;
  }
}
// The same with a plain (reference) model on the right.
void expect_params_close(ModelWrapper& got, const std::shared_ptr<ConfModel>& want, double tol,
                         const std::string& what) {
  ModelWrapper plain(want);
  expect_params_close(got, plain, tol, what);
}

class Conformance : public ::testing::TestWithParam<PluginCase> {
 protected:
  void SetUp() override {
    // The suite's ranks run one thread each (OMP_NUM_THREADS=1); a split case has two to share.
    threads_ = omp_get_max_threads();
    if (GetParam().split) omp_set_num_threads(2);
    if (GetParam().toml.empty() && dist::world_size() > 1)
      GTEST_SKIP() << "without a plugin, ranks do not share gradients";
    if (!runs_here(GetParam()))
      GTEST_SKIP() << GetParam().name << " needs a multiple of " << GetParam().group() << " ranks";
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  int threads_ = 1;
  const int64_t b = GetParam().rows;  // per-replica batch
  const int tp = GetParam().group();                  // ranks of a replica (they see the same rows)
  const int n = dist::world_size() / GetParam().group();  // data-parallel replicas
};

// 1. K steps on per-rank batches b match one process on batches N * b (through the model
// and backward, or through execute_pipeline: one step path under every plugin).
void training_parity(const PluginCase& c, int64_t b, int tp, int n, bool via_pipeline) {
  const int K = 4;
  auto ref = conf_model();
  optim::SGD ref_opt(ref->named_parameters(), sgd());
  std::vector<double> ref_losses;
  std::vector<Tensor> ref_logits;
  for (int s = 0; s < K; ++s) {
    auto [x, y] = conf_batch(s, n * b);
    ref_opt.zero_grad();
    auto out = (*ref)(x, y);
    Tensor loss = out.loss;
    ref_losses.push_back(loss.item());
    ref_logits.push_back(out.logits.detach());
    loss.backward();
    ref_opt.step();
  }
  Booster booster = booster_for(c);
  auto model = conf_model(42 + uint64_t(dist::world_rank()) * (c.toml.empty() ? 0 : 1));  // ranks differ
  auto opt = std::make_shared<optim::SGD>(model->named_parameters(), sgd());
  auto boosted = booster.boost(model, opt);
  for (int s = 0; s < K; ++s) {
    auto [x, y] = my_slice(conf_batch(s, n * b), b, 0, 1, tp, &booster);
    boosted.optimizer->zero_grad();
    Tensor logits;
    auto loss = forward_backward(booster, boosted, x, y, 1.0, &logits, via_pipeline);
    boosted.optimizer->step();
    // What vit_train logs: the global batch's mean under every plugin.
    const double logged = booster.mean_loss(loss);
    EXPECT_NEAR(logged, ref_losses[size_t(s)], 1e-5 * std::abs(ref_losses[size_t(s)])) << "step " << s;
    if (loss.defined()) {  // the outputs (a pipeline's return_outputs) are this replica's rows of the reference's
      Tensor want = ref_logits[size_t(s)].narrow(0, int64_t(replica_index(tp, &booster)) * b, b);
      const auto [first, columns] = conf_logit_columns(*boosted.model->module(), want.size(-1));  // a split head's
      want = want.narrow(-1, first, columns).contiguous();
      ASSERT_EQ(logits.shape(), want.shape());
      auto got = logits.to(DType::f32).to_vector(), w = want.to_vector();
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-4) << "logit " << i << " step " << s;
    }
  }
  expect_params_close(*boosted.model, ref, 1e-5, "after training");
}

TEST_P(Conformance, TrainingParity) { training_parity(GetParam(), b, tp, n, false); }
TEST_P(Conformance, TrainingParityThroughExecutePipeline) { training_parity(GetParam(), b, tp, n, true); }

// 2. Accumulating A micro-batches (the first A-1 under no_sync) equals one large-batch step.
TEST_P(Conformance, NoSyncAccumulationEqualsLargeBatch) {
  if (!make(GetParam()) || !make(GetParam())->support_no_sync()) GTEST_SKIP() << "no no_sync";
  const int A = 3;
  auto batch = conf_batch(7, n * b * A);
  auto ref = conf_model();
  optim::SGD ref_opt(ref->named_parameters(), sgd());
  (*ref)(batch.first, batch.second).loss.backward();
  ref_opt.step();

  Booster booster = booster_for(GetParam());
  auto model = conf_model();
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  for (int m = 0; m < A; ++m) {
    auto [x, y] = my_slice(batch, b, m, A, tp, &booster);
    if (m < A - 1) {
      auto scope = booster.no_sync(*boosted.model, boosted.optimizer.get());
      forward_backward(booster, boosted, x, y, 1.0 / A);
    } else {
      forward_backward(booster, boosted, x, y, 1.0 / A);
    }
  }
  boosted.optimizer->step();
  expect_params_close(*boosted.model, ref, 1e-5, "after accumulation");
}

// 2b. Backward completes the gradient synchronization by itself (the autograd engine runs
// the plugin's finish at its end): a plain loss.backward(), not booster.backward, trains like
// the reference; and two synchronized backwards before a step (no no_sync) accumulate
// exactly as one backward over both halves.
TEST_P(Conformance, PlainBackwardsSynchronizeAndAccumulate) {
  if (GetParam().pp > 1) GTEST_SKIP() << "a pipeline stage has no whole forward";
  const int A = 2;
  auto batch = conf_batch(9, n * b * A);
  auto ref = conf_model();
  optim::SGD ref_opt(ref->named_parameters(), sgd());
  (*ref)(batch.first, batch.second).loss.backward();
  ref_opt.step();

  Booster booster = booster_for(GetParam());
  auto model = conf_model(42 + uint64_t(dist::world_rank()) * (GetParam().toml.empty() ? 0 : 1));  // ranks differ
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  for (int m = 0; m < A; ++m) {
    auto [x, y] = my_slice(batch, b, m, A, tp, &booster);
    scale((*boosted.model)(x, y).loss, 1.0 / A).backward();
  }
  boosted.optimizer->step();
  expect_params_close(*boosted.model, ref, 1e-5, "after two plain backwards");
}

// 2c. Evaluation's one path: forward only through execute_pipeline under no_grad, summed
// with sum_over_replicas, counts each row of the global batch once and gives its mean loss
// under every layout (tensor-parallel ranks score the same rows; only a pipeline's last
// stage holds outputs).
TEST_P(Conformance, EvaluationCountsEachRowOnce) {
  auto batch = conf_batch(11, n * b);
  auto ref = conf_model();
  NoGradGuard ng;
  const double want = (*ref)(batch.first, batch.second).loss.item();
  Booster booster = booster_for(GetParam());
  auto model = conf_model();
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  auto [x, y] = my_slice(batch, b, 0, 1, tp, &booster);
  nn::Module& m = *boosted.model->module();
  StageCriterion ce = [&m](const TensorMap& out, const TensorMap& bt) { return conf_loss(m, out.at("logits"), bt.at("labels")); };
  PipelineResult res = booster.execute_pipeline(single_batch({{kConfInput, x}, {"labels", y}}), *boosted.model, ce,
                                                nullptr, true, true);
  const bool held = res.loss.defined();
  const auto sums = booster.sum_over_replicas({double(b), held ? res.loss.item() * double(b) : 0.0}, held);
  EXPECT_EQ(sums[0], double(n * b));
  EXPECT_NEAR(sums[1] / sums[0], want, 1e-5 * std::abs(want));
}

// 3. Clipping by the global norm equals the single-process clip.
TEST_P(Conformance, ClipByGlobalNorm) {
  auto batch = conf_batch(3, n * b);
  auto ref = conf_model();
  optim::SGD ref_opt(ref->named_parameters(), sgd());
  (*ref)(batch.first, batch.second).loss.backward();
  const double ref_norm = optim::clip_grad_norm(ref->parameters(), 0.05);
  ref_opt.step();

  Booster booster = booster_for(GetParam());
  auto model = conf_model();
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  auto [x, y] = my_slice(batch, b, 0, 1, tp, &booster);
  forward_backward(booster, boosted, x, y);
  const double norm = boosted.optimizer->clip_grad_by_norm(0.05);
  EXPECT_NEAR(norm, ref_norm, 1e-5 * ref_norm);
  ASSERT_TRUE(boosted.optimizer->get_grad_norm().has_value());
  EXPECT_LT(0.05, ref_norm) << "the test must actually clip";
  boosted.optimizer->step();
  expect_params_close(*boosted.model, ref, 1e-5, "after a clipped step");
}

// 4. Invalid configurations are refused with an error naming the option.
TEST_P(Conformance, InvalidConfigurationsAreRefused) {
  const PluginCase& c = GetParam();
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { Booster(make(c), "fp8"); }, "fp8");
  auto model = conf_model();
  Booster booster(make(c));
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  expect_error([&] { booster.execute_pipeline({}, *boosted.model, {}); }, "pipeline");
  if (c.toml.empty()) return;
  expect_error([&] { make({c.name, c.toml + "bucket_cap = 3\n"}); }, "unknown key 'plugin.bucket_cap'");
  expect_error([&] { make({c.name, "[plugin]\nname = 'torch_dpp'\n"}); }, "unknown plugin 'torch_dpp'");
  expect_error([&] { make({c.name, "[plugin]\nname = 'torch_ddp'\nbucket_cap_mb = -1\n"}); }, "bucket_cap_mb");
  expect_error([&] { make({c.name, "[plugin]\nname = 'torch_ddp'\nstatic_graph = 1\n"}); }, "plugin.static_graph");
  {
    auto scope = booster.no_sync(*boosted.model, boosted.optimizer.get());
    expect_error([&] { booster.no_sync(*boosted.model, boosted.optimizer.get()); }, "no_sync");
  }
}

// 6. A model built under nn::LazyInit and boosted holds bit for bit what the same model
// built eagerly holds, each rank only what it keeps (ranks that record different seeds
// take the first rank's recipes, as eager ranks take its weights), and trains the same.
TEST_P(Conformance, LazyInitEqualsEager) {
  Booster eb = booster_for(GetParam());
  auto eager = conf_model();
  auto er = eb.boost(eager, std::make_shared<optim::SGD>(eager->named_parameters(), sgd()));
  Booster lb = booster_for(GetParam());
  std::shared_ptr<ConfModel> lazy;
  {
    nn::LazyInit scope;
    lazy = conf_model(42 + uint64_t(dist::world_rank()) * (GetParam().toml.empty() ? 0 : 1));
  }
  ASSERT_TRUE(nn::is_lazy(*lazy));
  auto lr = lb.boost(lazy, std::make_shared<optim::SGD>(lazy->named_parameters(), sgd()));
  EXPECT_FALSE(nn::is_lazy(*lr.model->module()));
  expect_params_close(*lr.model, *er.model, 0, "lazy against eager, at boost");
  for (int s = 0; s < 2; ++s) {
    auto [x, y] = my_slice(conf_batch(s, n * b), b, 0, 1, tp, &eb);
    for (auto* r : {&er, &lr}) {
      r->optimizer->zero_grad();
      forward_backward(r == &er ? eb : lb, *r, x, y);
      r->optimizer->step();
    }
  }
  expect_params_close(*lr.model, *er.model, 0, "lazy against eager, after two steps");
}

// 7. Activation checkpointing trains exactly as without it under every plugin, pipeline
// schedule and split_batch, dropout on (the recomputation draws the same masks, from the
// default generator and from tensor parallelism's own streams).
TEST_P(Conformance, GradientCheckpointingMatchesPlain) {
  auto build = [](bool ckpt) {
    auto m = conf_model(42, 0.1);
    if (ckpt) m->gradient_checkpointing_enable();
    return m;
  };
  Booster pb = booster_for(GetParam()), cb = booster_for(GetParam());
  auto pm = build(false), cm = build(true);
  auto pr = pb.boost(pm, std::make_shared<optim::SGD>(pm->named_parameters(), sgd()));
  auto cr = cb.boost(cm, std::make_shared<optim::SGD>(cm->named_parameters(), sgd()));
  for (int s = 0; s < 2; ++s) {
    auto [x, y] = my_slice(conf_batch(s, n * b), b, 0, 1, tp, &pb);
    double losses[2];
    for (int k = 0; k < 2; ++k) {
      Booster& bo = k ? cb : pb;
      auto& r = k ? cr : pr;
      manual_seed(500 + uint64_t(s), uint64_t(dist::world_rank()));
      r.optimizer->zero_grad();
      losses[k] = bo.mean_loss(forward_backward(bo, r, x, y));
      r.optimizer->step();
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::abs(losses[0])) << "step " << s;
  }
  expect_params_close(*cr.model, *pr.model, 1e-6, "checkpointed against plain, after two steps");
}

// 5. Save under this configuration, load into fresh objects under another (sharded and
// single-file), continue: the result matches the uninterrupted run.
TEST_P(Conformance, CheckpointRoundTripAcrossConfigurations) {
  const int K1 = 2, K2 = 2;
  // The same global batches under any configuration: each of its replicas (tp_of ranks
  // each) takes its share of the world * b rows.
  auto train = [&](Booster& bo, BoostResult<ConfModel>& r, int from, int to, int tp_of) {
    const int64_t rows = b * tp_of;
    for (int s = from; s < to; ++s) {
      auto [x, y] = my_slice(conf_batch(s, dist::world_size() * b), rows, 0, 1, tp_of, &bo);
      r.optimizer->zero_grad();
      forward_backward(bo, r, x, y);
      r.optimizer->step();
    }
  };
  Booster booster = booster_for(GetParam());
  auto model = conf_model();
  auto run = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  train(booster, run, 0, K1, tp);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("booster_conf_" + std::string(kConfName) + "_" + GetParam().name + "_np" +
                                                 std::to_string(dist::world_size()))).string();
  for (bool shard : {true, false}) {
    const std::string m = dir + (shard ? "/model" : "/model.ckpt"), o = dir + (shard ? "/optim" : "/optim.ckpt");
    std::filesystem::create_directories(dir);
    booster.save_model(*run.model, m, shard);
    booster.save_optimizer(*run.optimizer, o, shard);
    // Load under every other configuration that can run at this world size.
    for (const auto& other : conf_cases()) {
      // (A split case's checkpoint layout is its plugin's: loading into it is loading into that.)
      if ((other.toml.empty() && dist::world_size() > 1) || !runs_here(other) || other.split || !loads_here(other))
        continue;
      SCOPED_TRACE("loading into " + other.name + (shard ? " (sharded)" : " (one file)"));
      Booster ob(make(other));
      auto m2 = conf_model(7);
      auto r2 = ob.boost(m2, std::make_shared<optim::SGD>(m2->named_parameters(), sgd()));
      ob.load_model(*r2.model, m);
      ob.load_optimizer(*r2.optimizer, o);
      expect_params_close(*r2.model, *run.model, 0, "loaded from " + GetParam().name + " into " + other.name);
      if (shard) continue;
      train(ob, r2, K1, K1 + K2, other.group());
      // The reference continues under this configuration from the same checkpoint (a
      // boosted ZeRO-3 model has no parameters of its own to clone).
      Booster cb = booster_for(GetParam());
      auto ref = conf_model(9);
      auto rr = cb.boost(ref, std::make_shared<optim::SGD>(ref->named_parameters(), sgd()));
      cb.load_model(*rr.model, m);
      cb.load_optimizer(*rr.optimizer, o);
      train(cb, rr, K1, K1 + K2, tp);
      expect_params_close(*r2.model, *rr.model, 1e-5, "continued after loading into " + other.name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plugins, Conformance, ::testing::ValuesIn(conf_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
