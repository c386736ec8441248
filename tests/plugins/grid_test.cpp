// 2D, 2.5D and 3D tensor parallelism specifics (the conformance suite covers training
// parity, no_sync, clipping and checkpoints across layouts): sizes that are not grids refused
// by name, what the ViT policy partitions (weights and activations, per mode), a batch whose
// rows do not divide into the row blocks (padded without a pipeline, refused with one), heads
// that do not divide, and the layer norm's two-pass variance far from zero. Runs at np 4
// (2D) and 8 (2.5D with depth 2, 3D; 2D beside dp 2 and pp 2).
#include <gtest/gtest.h>

#include <cmath>

#include "booster/booster.h"
#include "core/dist/runtime.h"
#include "nn/parallel/grid_layers.h"
#include "nn/vit.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/sgd.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "tests/plugins/vit_cases.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;
using namespace booster::plugin_tests;

namespace {

plugins::HybridParallelOptions options(const std::string& extra) {
  return plugins::HybridParallelOptions::from_config(
      Config::from_string("[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\n" + extra, "grid.toml"));
}

// The grids that fill this world: 2D at 4 ranks; 2.5D (depth 2) and 3D at 8.
std::vector<std::string> grids_here() {
  if (dist::world_size() == 4) return {"tp_size = 4\ntp_mode = '2d'\n"};
  if (dist::world_size() == 8) return {"tp_size = 8\ntp_mode = '2.5d'\ntp_depth = 2\n", "tp_size = 8\ntp_mode = '3d'\n"};
  return {};
}

TEST(GridModes, SizesThatAreNotGridsAreRefused) {
  auto refused = [](const std::string& extra) { return testkit::error_of([&] { options(extra).validate(); }); };
  EXPECT_NE(refused("tp_size = 2\ntp_mode = '2d'\n").find("tp_mode 2d: tp_size 2 is not q^2"), std::string::npos);
  EXPECT_NE(refused("tp_size = 8\ntp_mode = '2.5d'\ntp_depth = 3\n").find("tp_size 8 is not q^2 x tp_depth 3"),
            std::string::npos);
  EXPECT_NE(refused("tp_size = 4\ntp_mode = '3d'\n").find("tp_mode 3d: tp_size 4 is not d^3"), std::string::npos);
  EXPECT_NE(refused("tp_size = 4\ntp_mode = '4d'\n").find("tp_mode must be 1d, 2d, 2.5d or 3d, got '4d'"),
            std::string::npos);
  EXPECT_NE(refused("tp_size = 4\ntp_mode = '2d'\ntp_depth = 2\n").find("needs tp_mode = \"2.5d\""), std::string::npos);
  EXPECT_NE(refused("tp_size = 2\ntp_depth = 2\n").find("tp_depth 2 needs tp_mode"), std::string::npos);
  EXPECT_NE(refused("tp_size = 4\ntp_mode = '2d'\nenable_sequence_parallelism = true\n").find("tp_mode 1d"),
            std::string::npos);
  EXPECT_EQ(refused("tp_size = 8\ntp_mode = '2.5d'\ntp_depth = 2\n"), "");
  EXPECT_EQ(refused("tp_size = 27\ntp_mode = '3d'\n"), "");
}

TEST(GridModes, PolicyPartitionsWeightsAndActivations) {
  for (const auto& g : grids_here()) {
    SCOPED_TRACE(g);
    auto plugin = std::make_shared<plugins::HybridParallelPlugin>(options(g));
    const nn::TensorGrid& grid = *plugin->grid();
    Booster booster(plugin);
    auto model = fresh_model();
    auto r = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
    auto& vit = dynamic_cast<nn::ViTForImageClassification&>(*r.model->module());
    const std::string suffix = grid.mode() == "2d" ? "2D" : grid.mode() == "2.5d" ? "2p5D" : "3D";
    auto& layer = *vit.vit->encoder->layer->at(0);
    EXPECT_EQ(layer.get("attention.attention.query")->type_name(), "Linear" + suffix);
    EXPECT_EQ(layer.get("layernorm_before")->type_name(), "LayerNorm" + suffix);
    EXPECT_EQ(vit.classifier->type_name(), "Classifier" + suffix);
    EXPECT_EQ(vit.vit->embeddings->get("patch_embeddings.projection")->type_name(), "PatchEmbedding" + suffix);
    // Weights: [32, 32] as [32 / q, 32 / q] blocks (2D, 2.5D: the same block at every depth),
    // [32 / d, 32 / d^2] in 3D; intermediate [64, 32] and output [32, 64] alike.
    const int64_t q = grid.q(), in_blocks = grid.mode() == "3d" ? q * q : q;
    for (auto [path, out, in] : {std::tuple{"attention.attention.query", 32, 32}, {"intermediate.dense", 64, 32},
                                 {"output.dense", 32, 64}}) {
      auto* lin = dynamic_cast<nn::Linear*>(layer.get(path).get());
      ASSERT_NE(lin, nullptr);
      EXPECT_EQ(lin->weight->shape(), (Shape{out / q, in / in_blocks})) << path;
      EXPECT_EQ(lin->weight->region()->full, (Shape{out, in})) << path;
    }
    // Activations: [B / row_blocks, T, H / f] between the layers; whole logits at the end.
    const int64_t rows = 8, row_blocks = grid.row_blocks();
    EXPECT_EQ(row_blocks, grid.mode() == "2d" ? 2 : 4);
    auto [x, y] = global_batch(0, rows);
    NoGradGuard ng;
    Tensor h = vit.vit->embeddings(x);
    EXPECT_EQ(h.shape(), (Shape{rows / row_blocks, 5, 32 / q}));
    EXPECT_EQ(vit.vit->encoder->layer->at(0)(h).shape(), h.shape());
    EXPECT_EQ((*r.model)(x, y).logits.shape(), (Shape{rows, 3}));
  }
}

// Rows that do not divide into the row blocks: padded (exact, the padding takes no
// gradient) when every rank holds the whole model.
TEST(GridModes, BatchOfRowsThatDoNotDivideIsExactWithoutPipeline) {
  for (const auto& g : grids_here()) {
    SCOPED_TRACE(g);
    auto ref = fresh_model();
    optim::SGD ref_opt(ref->named_parameters(), sgd());
    Booster booster(std::make_shared<plugins::HybridParallelPlugin>(options(g)));
    auto model = fresh_model();
    auto r = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
    auto [x, y] = global_batch(3, 3);  // 3 rows over 2 or 4 row blocks
    for (int step = 0; step < 2; ++step) {
      auto want = (*ref)(x, y);
      auto got = (*r.model)(x, y);
      ASSERT_EQ(got.logits.shape(), want.logits.shape());
      EXPECT_NEAR(got.loss.item(), want.loss.item(), 1e-5 * std::abs(want.loss.item())) << "step " << step;
      ref_opt.zero_grad();
      want.loss.backward();
      ref_opt.step();
      r.optimizer->zero_grad();
      booster.backward(got.loss, *r.optimizer);
      r.optimizer->step();
    }
  }
}

TEST(GridModes, PipelineMicroBatchesMustDivide) {
  if (dist::world_size() != 8) GTEST_SKIP() << "2D x pp 2 needs 8 ranks";
  Booster booster(std::make_shared<plugins::HybridParallelPlugin>(
      options("tp_size = 4\ntp_mode = '2d'\npp_size = 2\nnum_microbatches = 2\n")));
  auto model = fresh_model();
  auto r = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  auto [x, y] = global_batch(0, 6);  // micro-batches of 3 rows over 2 row blocks
  StageCriterion ce = [](const TensorMap& out, const TensorMap& b) { return cross_entropy(out.at("logits"), b.at("labels")); };
  const std::string e = testkit::error_of([&] {
    booster.execute_pipeline(single_batch({{"pixel_values", x}, {"labels", y}}), *r.model, ce, r.optimizer.get());
  });
  // Every stage refuses it before any message moves (none waits for another).
  EXPECT_NE(e.find("2D grid 2 x 2: a batch of 3 rows does not divide into its 2 row blocks"), std::string::npos) << e;
}

TEST(GridModes, HeadsThatDoNotDivideAreRefused) {
  for (const auto& g : grids_here()) {
    nn::ViTConfig c = tiny_config();
    c.num_attention_heads = 1;  // hidden 32 in one head: 2 feature blocks cannot split it
    auto model = std::make_shared<nn::ViTForImageClassification>(c);
    Booster booster(std::make_shared<plugins::HybridParallelPlugin>(options(g)));
    const std::string e = testkit::error_of(
        [&] { booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd())); });
    EXPECT_NE(e.find("num_attention_heads 1 does not divide into the"), std::string::npos) << e;
  }
}

// Lamb's and Lars's trust ratios take whole-tensor norms of parameters held in blocks (1D
// shards and grid blocks, a replicated block counted once): training matches one process.
TEST(GridModes, LambAndLarsNormsAreGlobal) {
  std::vector<std::string> layouts = grids_here();
  layouts.push_back("tp_size = " + std::to_string(dist::world_size()) + "\n");  // 1D, Megatron's
  using Make = std::function<std::shared_ptr<optim::Optimizer>(const optim::NamedParams&)>;
  const std::vector<std::pair<std::string, Make>> optimizers = {
      {"lamb", [](const optim::NamedParams& p) { return std::make_shared<optim::Lamb>(p, optim::LambOptions{0.01, 0.9, 0.999, 1e-6, 0.01}); }},
      {"lars", [](const optim::NamedParams& p) { return std::make_shared<optim::Lars>(p, optim::LarsOptions{0.1, 0.9, 1e-3, 1e-4}); }}};
  for (const auto& g : layouts)
    for (const auto& [what, make] : optimizers) {
      SCOPED_TRACE(g + what);
      nn::ViTConfig c = tiny_config();
      c.num_attention_heads = 8;  // 1D over 8 ranks splits the heads too
      manual_seed(42);
      auto ref = std::make_shared<nn::ViTForImageClassification>(c);
      auto ref_opt = make(ref->named_parameters());
      manual_seed(42);
      auto model = std::make_shared<nn::ViTForImageClassification>(c);
      Booster booster(std::make_shared<plugins::HybridParallelPlugin>(options(g)));
      auto r = booster.boost(model, make(model->named_parameters()));
      for (int s = 0; s < 2; ++s) {
        auto [x, y] = global_batch(s, 8);
        ref_opt->zero_grad();
        (*ref)(x, y).loss.backward();
        ref_opt->step();
        r.optimizer->zero_grad();
        booster.backward((*r.model)(x, y).loss, *r.optimizer);
        r.optimizer->step();
      }
      const ShardedState got = r.model->checkpoint_state();
      for (auto& [name, p] : ref->named_parameters()) {
        auto a = testkit::logical_state(got, name).to_vector(), b = Tensor(p).to_vector();
        double err = 0, scale = 1e-3;
        for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::abs(a[i] - b[i]))), scale = std::max(scale, double(std::abs(b[i])));
        EXPECT_LE(err, 1e-4 * scale) << name;
      }
    }
}

// Features around 1e4 with unit spread: E[x^2] - E[x]^2 in floats loses the variance
// entirely there (x^2 ~ 1e8, a float's step 8); the two-pass variance keeps it.
TEST(GridLayerNorm, TwoPassVarianceIsStableFarFromZero) {
  for (const auto& g : grids_here()) {
    auto o = options(g);
    plugins::HybridParallelPlugin plugin(o);
    const nn::GridLayout& L = plugin.grid()->layout();
    const int64_t rows = 6, hidden = 32, f = L.feature_blocks(), hb = hidden / f, first = L.feature_block() * hb;
    Tensor x = Tensor::empty({rows, hidden}), w = Tensor::empty({hidden}), c = Tensor::empty({rows, hidden});
    Generator(5).normal_(x), Generator(6).normal_(w), Generator(7).normal_(c);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 1e4f;
    Tensor xb = x.narrow(1, first, hb).contiguous().requires_grad_(true);
    Tensor wb = w.narrow(0, first, hb).contiguous().requires_grad_(true);
    Tensor bb = Tensor::zeros({hb}).requires_grad_(true);
    Tensor y = nn::grid_layer_norm(xb, wb, bb, 1e-5, *L.feature);
    sum(mul(y, c.narrow(1, first, hb).contiguous())).backward();
    for (int64_t r = 0; r < rows; ++r) {  // the reference in double
      double mu = 0, var = 0, a = 0, b = 0;
      for (int64_t j = 0; j < hidden; ++j) mu += x.data<float>()[r * hidden + j] / double(hidden);
      for (int64_t j = 0; j < hidden; ++j) var += std::pow(x.data<float>()[r * hidden + j] - mu, 2) / double(hidden);
      const double rstd = 1 / std::sqrt(var + 1e-5);
      auto xhat = [&](int64_t j) { return (x.data<float>()[r * hidden + j] - mu) * rstd; };
      auto dxhat = [&](int64_t j) { return double(c.data<float>()[r * hidden + j]) * w.data<float>()[j]; };
      for (int64_t j = 0; j < hidden; ++j) a += dxhat(j) / double(hidden), b += dxhat(j) * xhat(j) / double(hidden);
      for (int64_t j = 0; j < hb; ++j) {
        EXPECT_NEAR(y.data<float>()[r * hb + j], xhat(first + j) * w.data<float>()[first + j], 2e-3) << r << "," << j;
        EXPECT_NEAR(xb.grad().data<float>()[r * hb + j], rstd * (dxhat(first + j) - a - xhat(first + j) * b), 2e-3);
      }
    }
  }
}

}  // namespace
