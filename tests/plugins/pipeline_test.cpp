// Pipeline parallelism specifics (the conformance suite covers ViT training parity, no_sync,
// clipping and checkpoints across layouts for pp2 1F1B / interleaved / balanced, tp2 x pp2
// and pp2 with ZeRO-1/2): the stage manager's layer split as Colossal-AI's, the balanced
// partition, the schedules' orders, a plain Sequential pipelined (uniform, balanced,
// interleaved), forward-only evaluation with a ragged last micro-batch, mixed precision, the
// errors that name their arguments, and 3-D parallelism (tp2 x pp2 x dp2 at np 8).
#include <gtest/gtest.h>

#include <set>

#include <cmath>

#include "booster/booster.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/gpt2.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "pipeline/stage_manager.h"
#include "pipeline/zero_bubble.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;
using pipeline::PipelineSchedule;

namespace {

std::shared_ptr<plugins::HybridParallelPlugin> pipeline(const std::string& extra) {
  auto o = plugins::HybridParallelOptions::from_config(Config::from_string(
      "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\n" + extra, "pipeline.toml"));
  return std::make_shared<plugins::HybridParallelPlugin>(o);
}

TEST(StageManager, DistributesLayersAsColossalAI) {
  const auto& world = dist::ProcessGroup::world();
  const int S = world.size();
  for (int C : {1, 2}) {
    pipeline::PipelineStageManager sm(world, C);
    const int slots = S * C;
    for (int64_t n : {int64_t(slots), int64_t(slots) + 1, int64_t(2 * slots) + 3, int64_t(12)}) {
      if (n < slots) continue;
      // Colossal-AI: n // slots each, one more for the n % slots slots from slots//2 - r//2.
      std::vector<int64_t> want(size_t(slots), n / slots);
      const int64_t r = n % slots;
      for (int64_t i = 0; i < r; ++i) ++want[size_t(slots / 2 - r / 2 + i)];
      EXPECT_EQ(sm.distribute_layers(n), want) << n << " layers, " << slots << " slots";
      // This stage's chunks: slot stage + c*S, the first slot reads the batch, the last ends.
      int64_t covered = 0;
      for (int c = 0; c < C; ++c) {
        auto spec = sm.stage_spec(n, c);
        const int slot = sm.stage() + c * S;
        int64_t begin = 0;
        for (int i = 0; i < slot; ++i) begin += want[size_t(i)];
        EXPECT_EQ(spec.layer_begin, begin);
        EXPECT_EQ(spec.layer_end, begin + want[size_t(slot)]);
        EXPECT_EQ(spec.first, slot == 0);
        EXPECT_EQ(spec.last, slot == slots - 1);
        covered += spec.layer_end - spec.layer_begin;
      }
      EXPECT_EQ(dist::all_reduce_scalar(double(covered), dist::ReduceOp::sum), double(n));
    }
    EXPECT_NE(testkit::error_of([&] { sm.distribute_layers(slots - 1); }).find("cannot fill"), std::string::npos);
  }
  pipeline::PipelineStageManager given(world, 1, std::vector<int64_t>(size_t(S), 2));
  EXPECT_EQ(given.distribute_layers(2 * S), std::vector<int64_t>(size_t(S), 2));
  EXPECT_NE(testkit::error_of([&] { given.distribute_layers(2 * S + 1); }).find("num_layers_per_stage sums to"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([&] { pipeline::PipelineStageManager(world, 2, {1}); }).find("num_layers_per_stage has 1"),
            std::string::npos);
  // Interleaved: slot s + c*S, so the last stage's chunk c feeds the first stage's chunk c + 1.
  pipeline::PipelineStageManager two(world, 2);
  for (int slot = 0; slot < 2 * S; ++slot) {
    EXPECT_EQ(two.stage_of_slot(slot), slot % S);
    EXPECT_EQ(two.chunk_of_slot(slot), slot / S);
    EXPECT_EQ(two.rank_of_slot(slot), world.ranks()[size_t(slot % S)]);
  }
  EXPECT_EQ(two.is_last_stage(), world.rank() == S - 1);
  // Zero bubble's V: chunk 0 down the stages, chunk 1 back up; stage 0 holds the first and
  // the last slot, the last stage's two chunks meet.
  pipeline::PipelineStageManager v(world, 2, {}, true);
  EXPECT_EQ(v.slot_of(0), world.rank());
  EXPECT_EQ(v.slot_of(1), 2 * S - 1 - world.rank());
  for (int slot = 0; slot < 2 * S; ++slot) {
    EXPECT_EQ(v.stage_of_slot(slot), slot < S ? slot : 2 * S - 1 - slot);
    EXPECT_EQ(v.chunk_of_slot(slot), slot < S ? 0 : 1);
  }
  EXPECT_EQ(v.is_first_stage(), world.rank() == 0);
  EXPECT_EQ(v.is_last_stage(), world.rank() == 0);
  EXPECT_EQ(v.is_last_stage(1), world.rank() == 0);
  EXPECT_FALSE(v.is_last_stage(0));
  EXPECT_TRUE(v.stage_spec(4 * S, 1).last == (world.rank() == 0));
  EXPECT_NE(testkit::error_of([&] { pipeline::PipelineStageManager(world, 3, {}, true); }).find("two model chunks"),
            std::string::npos);
}

TEST(StageManager, BalancedPartitionMinimizesTheHeaviestPart) {
  EXPECT_EQ(pipeline::partition_balanced({1, 1, 1, 1, 10, 1}, 2), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(pipeline::partition_balanced({1, 1, 1, 1}, 4), (std::vector<int64_t>{1, 1, 1, 1}));
  for (auto [w, parts, best] : std::vector<std::tuple<std::vector<int64_t>, int, int64_t>>{
           {{5, 1, 1, 1, 1, 1}, 3, 5}, {{3, 3, 3, 3, 3, 3, 3, 3}, 3, 9}, {{1, 9, 1, 1, 1, 1, 1, 1, 1}, 2, 10}}) {
    auto sizes = pipeline::partition_balanced(w, parts);
    ASSERT_EQ(int(sizes.size()), parts);
    int64_t at = 0, heaviest = 0;
    for (int64_t k : sizes) {
      EXPECT_GE(k, 1);
      int64_t sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += w[size_t(at + i)];
      heaviest = std::max(heaviest, sum);
      at += k;
    }
    EXPECT_EQ(at, int64_t(w.size()));
    EXPECT_EQ(heaviest, best);
  }
}

// Every micro-batch (and chunk) goes forward once and backward once, forward first; 1F1B
// keeps at most S - stage micro-batches in flight.
TEST(Schedules, OrdersAreComplete) {
  const auto& world = dist::ProcessGroup::world();
  const int S = world.size();
  for (int C : {1, 2}) {
    pipeline::PipelineStageManager sm(world, C);
    std::unique_ptr<PipelineSchedule> sch;
    if (C == 1) sch = std::make_unique<pipeline::OneForwardOneBackwardSchedule>(sm, pipeline::ScheduleOptions{});
    else sch = std::make_unique<pipeline::InterleavedSchedule>(sm, pipeline::ScheduleOptions{});
    for (int64_t m : {int64_t(S), int64_t(2 * S), int64_t(4 * S)}) {
      std::map<std::pair<int, int64_t>, int> state;  // 1 after forward, 2 after backward
      int in_flight = 0, peak = 0;
      for (auto& op : sch->order(m, false)) {
        int& st = state[{op.chunk, op.microbatch}];
        EXPECT_EQ(st, op.forward ? 0 : 1) << "chunk " << op.chunk << " micro-batch " << op.microbatch;
        st = op.forward ? 1 : 2;
        in_flight += op.forward ? 1 : -1;
        peak = std::max(peak, in_flight);
      }
      EXPECT_EQ(state.size(), size_t(m * C));
      for (auto& [k, st] : state) EXPECT_EQ(st, 2);
      if (C == 1) {
        EXPECT_LE(peak, S - sm.stage()) << m << " micro-batches";
      }
      auto fwd = sch->order(m, true);
      EXPECT_EQ(fwd.size(), size_t(m * C));
    }
    if (C == 2 && S > 1) {
      EXPECT_NE(testkit::error_of([&] { sch->check_microbatches(S + 1); }).find("multiple of pp_size"), std::string::npos);
    }
  }
}

// Zero bubble V: every stage's order runs F, B, W of each (chunk, micro-batch) once, in that
// order; the stages' orders together run to the end under the V's dependencies (each stage
// waits only for messages its order's passes need), whatever the costs; and where the
// backward weighs at least the forward (a transformer's is about twice) the simulated step is
// shorter than 1F1B's (S - 1 bubbles of a whole stage's forward and backward). A forward twice
// the backward with slow messages (the last costs) is where the V can lose: it only runs.
TEST(Schedules, ZeroBubbleVOrdersRunAndFillTheBubble) {
  using Op = PipelineSchedule::Op;
  using Part = PipelineSchedule::Part;
  for (int S : {2, 3, 4})
    for (int64_t m : {int64_t(S), int64_t(2 * S), int64_t(4 * S), int64_t(16)})
      for (auto c : {pipeline::ZeroBubbleCosts{}, pipeline::ZeroBubbleCosts{1.0, 1.2, 0.8, 0.1},
                     pipeline::ZeroBubbleCosts{1.0, 1.0, 0.5, 0.2}, pipeline::ZeroBubbleCosts{2.0, 1.0, 0.2, 0.5}}) {
        SCOPED_TRACE(std::to_string(S) + " stages, " + std::to_string(m) + " micro-batches, W " + std::to_string(c.w));
        double makespan = 0;
        const auto orders = pipeline::zero_bubble_v_orders(S, m, c, 2 * S, &makespan);
        ASSERT_EQ(int(orders.size()), S);
        // Run them: a pass goes when the one it depends on (by the V) has gone.
        std::set<std::tuple<char, int, int, int64_t>> done;  // (F/B/W, stage, chunk, micro-batch)
        auto ready = [&](int s, const Op& op) {
          const int64_t i = op.microbatch;
          if (op.forward)
            return op.chunk == 0 ? s == 0 || done.count({'F', s - 1, 0, i})
                                 : done.count({'F', s == S - 1 ? s : s + 1, s == S - 1 ? 0 : 1, i}) > 0;
          if (op.part == Part::weight) return done.count({'B', s, op.chunk, i}) > 0;
          if (op.chunk == 1) return done.count(s == 0 ? std::make_tuple('F', 0, 1, i) : std::make_tuple('B', s - 1, 1, i)) > 0;
          return done.count(s == S - 1 ? std::make_tuple('B', s, 1, i) : std::make_tuple('B', s + 1, 0, i)) > 0;
        };
        std::vector<size_t> next(size_t(S), 0);
        for (bool moved = true; moved;) {
          moved = false;
          for (int s = 0; s < S; ++s)
            while (next[size_t(s)] < orders[size_t(s)].size() && ready(s, orders[size_t(s)][next[size_t(s)]])) {
              const Op& op = orders[size_t(s)][next[size_t(s)]++];
              const char kind = op.forward ? 'F' : op.part == Part::input ? 'B' : 'W';
              EXPECT_TRUE(op.forward || op.part != Part::whole);
              EXPECT_TRUE(done.insert({kind, s, op.chunk, op.microbatch}).second) << kind << " twice";
              moved = true;
            }
        }
        for (int s = 0; s < S; ++s) EXPECT_EQ(next[size_t(s)], size_t(6 * m)) << "stage " << s << " stalled";
        const double stage_work = double(m) * 2 * (c.f + c.b + c.w);
        const double one_f_one_b = double(m + S - 1) * 2 * (c.f + c.b + c.w) + 2 * double(S - 1) * c.comm;
        EXPECT_GE(makespan, stage_work - 1e-9);
        if (c.b + c.w >= c.f) {
          EXPECT_LT(makespan, one_f_one_b) << "the bubble of 1F1B is " << one_f_one_b - stage_work;
        }
      }
}

// A user's plain Sequential, pipelined: training equals one process.
std::shared_ptr<nn::Sequential> mlp(int layers, uint64_t seed) {
  manual_seed(seed);
  auto s = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i) {
    s->push_back(std::make_shared<nn::Linear>(6, 6));
    s->push_back(std::make_shared<nn::GELU>());
  }
  return s;
}

Tensor mse(const Tensor& out, const Tensor& target) { return mean(mul(sub(out, target), sub(out, target))); }

TEST(Pipeline, SequentialTrainsAsOneProcess) {
  const int S = dist::world_size();
  if (S < 2) GTEST_SKIP() << "needs 2 ranks";
  for (std::string extra : {"pp_size = " + std::to_string(S) + "\nnum_microbatches = " + std::to_string(2 * S) + "\n",
                            "pp_size = " + std::to_string(S) + "\nmicrobatch_size = 1\npartition_method = 'balanced'\n",
                            "pp_size = " + std::to_string(S) + "\npp_style = 'interleaved'\nnum_model_chunks = 2\n"
                            "num_microbatches = " + std::to_string(S) + "\n",
                            "pp_size = " + std::to_string(S) + "\npp_style = 'zbv'\nnum_model_chunks = 2\n"
                            "num_microbatches = " + std::to_string(2 * S) + "\n"}) {
    SCOPED_TRACE(extra);
    auto ref = mlp(2 * S, 3), model = mlp(2 * S, 3);
    optim::SGD ref_opt(ref->named_parameters(), {0.1, 0.9});
    Booster booster(pipeline(extra));
    auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, 0.9}));
    for (int step = 0; step < 3; ++step) {
      Tensor x = Tensor::empty({int64_t(2 * S), 6}), y = Tensor::empty({int64_t(2 * S), 6});
      Generator(50 + uint64_t(step)).normal_(x);
      Generator(90 + uint64_t(step)).normal_(y);
      ref_opt.zero_grad();
      Tensor ref_loss = mse((*ref)(x), y);
      ref_loss.backward();
      ref_opt.step();
      b.optimizer->zero_grad();
      auto res = booster.execute_pipeline(
          single_batch({{"input", x}, {"target", y}}), *b.model, [](const TensorMap& out, const TensorMap& batch) { return mse(out.at("output"), batch.at("target")); },
          b.optimizer.get(), true, true);
      b.optimizer->step();
      // The stage holding the last slot has the loss: the last, or the first in zero bubble's V.
      if (dist::world_rank() == (extra.find("zbv") != std::string::npos ? 0 : S - 1)) {
        ASSERT_TRUE(res.loss.defined());
        // The mean of the micro-batches' means is the batch's mean (equal micro-batches).
        EXPECT_NEAR(res.loss.item(), ref_loss.item(), 1e-5 * std::abs(ref_loss.item()));
        EXPECT_EQ(res.outputs.at("output").shape(), (Shape{int64_t(2 * S), 6}));
      } else {
        EXPECT_FALSE(res.loss.defined());
      }
    }
    for (auto& [n, p] : ref->named_parameters()) {
      auto got = testkit::logical_param(*model, n).to_vector(), want = p.to_vector();
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << n;
    }
  }
}

std::shared_ptr<nn::ViTForImageClassification> vit(uint64_t seed = 1) {
  manual_seed(seed);
  return std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(4));
}

// One step's data iterator over a fixed batch.
DataIter once(const Tensor& x, const Tensor& y) { return single_batch({{"pixel_values", x}, {"labels", y}}); }

StageCriterion ce() { return on_keys([](const Tensor& l, const Tensor& y) { return cross_entropy(l, y); }); }

std::pair<Tensor, Tensor> images(int64_t rows, uint64_t seed) {
  auto c = testkit::tiny_vit(4);
  Tensor x = Tensor::empty({rows, 3, c.image_size, c.image_size});
  Generator(seed).normal_(x);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < rows; ++i) y.push_back(i % c.num_labels);
  return {x, Tensor::from_ints(y, {rows})};
}

// Evaluation runs through the pipeline with gradients off; a ragged last micro-batch is
// allowed and the loss is the batch's mean.
TEST(Pipeline, ForwardOnlyEvaluationWithARaggedLastMicroBatch) {
  const int S = dist::world_size();
  if (S < 2 || S > 4) GTEST_SKIP() << "pipelines the 4-layer test ViT over 2 to 4 ranks";
  auto ref = vit(), model = vit();
  Booster booster(pipeline("pp_size = " + std::to_string(S) + "\nmicrobatch_size = 2\n"));
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1}));
  auto [x, y] = images(5, 7);
  NoGradGuard ng;
  auto want = (*ref)(x, y);
  auto res = booster.execute_pipeline(once(x, y), *b.model, ce(), nullptr, true, true);
  if (dist::world_rank() != S - 1) return;
  EXPECT_NEAR(res.loss.item(), want.loss.item(), 1e-5);
  auto got = res.outputs.at("logits").to_vector(), w = want.logits.to_vector();
  ASSERT_EQ(got.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5);
}

TEST(Pipeline, ErrorsNameTheirArguments) {
  const int S = dist::world_size();
  if (S < 2 || S > 4) GTEST_SKIP() << "pipelines the 4-layer test ViT over 2 to 4 ranks";
  const std::string pp = "pp_size = " + std::to_string(S) + "\n";
  auto model = vit();
  Booster booster(pipeline(pp + "num_microbatches = 3\n"));
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1}));
  auto [x, y] = images(4, 1);
  EXPECT_NE(testkit::error_of([&] { booster.execute_pipeline(once(x, y), *b.model, ce(), b.optimizer.get()); })
                .find("not divisible by num_microbatches 3"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([&] { (*b.model)(x, y); }).find("execute_pipeline"), std::string::npos);
  EXPECT_NE(testkit::error_of([&] { booster.execute_pipeline(once(x, y), *b.model, ce(), nullptr); }).find("optimizer"),
            std::string::npos);
  auto m2 = vit();
  Booster few(pipeline(pp + "microbatch_size = 4\n"));
  auto b2 = few.boost(m2, std::make_shared<optim::SGD>(m2->named_parameters(), optim::SGDOptions{0.1}));
  EXPECT_NE(testkit::error_of([&] { few.execute_pipeline(once(x, y), *b2.model, ce(), b2.optimizer.get()); })
                .find("at least pp_size"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([&] { pipeline(pp + "pp_style = 'interleaved'\nnum_model_chunks = 2\nnum_microbatches = 3\n"); })
                .find("multiple of pp_size"),
            std::string::npos);
  EXPECT_NE(testkit::error_of([&] { pipeline(pp + "pp_style = 'zbv'\nnum_model_chunks = 3\nnum_microbatches = 4\n"); })
                .find("pp_style zbv needs num_model_chunks = 2, got 3"),
            std::string::npos);
  // Both micro-batch arguments, as Colossal-AI takes them: agreeing with the batch they train,
  // disagreeing they are named with it.
  const std::string both = pp + "num_microbatches = " + std::to_string(S) + "\nmicrobatch_size = " + std::to_string(4 / S) + "\n";
  auto m3 = vit();
  Booster agree(pipeline(both));
  auto b3 = agree.boost(m3, std::make_shared<optim::SGD>(m3->named_parameters(), optim::SGDOptions{0.1}));
  EXPECT_EQ(testkit::error_of([&] { agree.execute_pipeline(once(x, y), *b3.model, ce(), b3.optimizer.get()); }), "");
  auto m4 = vit();
  Booster disagree(pipeline(pp + "num_microbatches = " + std::to_string(S) + "\nmicrobatch_size = 3\n"));
  auto b4 = disagree.boost(m4, std::make_shared<optim::SGD>(m4->named_parameters(), optim::SGDOptions{0.1}));
  const std::string err = testkit::error_of([&] { disagree.execute_pipeline(once(x, y), *b4.model, ce(), b4.optimizer.get()); });
  EXPECT_NE(err.find("x microbatch_size 3 = " + std::to_string(3 * S) + " rows, but the batch has 4"), std::string::npos) << err;
  EXPECT_NE(testkit::error_of([&] { pipeline(pp); }).find("num_microbatches or microbatch_size"), std::string::npos);
  // A model that is no pipeline says so.
  auto seq_free = std::make_shared<nn::Linear>(4, 4);
  Booster plain(pipeline(pp + "num_microbatches = 2\n"));
  EXPECT_NE(testkit::error_of([&] { plain.boost(seq_free); }).find("nn::PipelineModule"), std::string::npos);
}

// bf16 and fp16 (loss-scaled: the last stage scales, backward_by_grad passes the scaled
// gradient on unscaled again) train through the pipeline close to fp32.
TEST(Pipeline, MixedPrecisionFollowsFp32) {
  const int S = dist::world_size();
  if (S < 2 || S > 4) GTEST_SKIP() << "pipelines the 4-layer test ViT over 2 to 4 ranks";
  std::map<std::string, std::shared_ptr<nn::ViTForImageClassification>> trained;
  for (std::string prec : {"fp32", "bf16", "fp16"}) {
    for (int zero : {0, 1}) {
      auto model = vit();
      auto o = plugins::HybridParallelOptions::from_config(Config::from_string(
          "[plugin]\nname = 'hybrid_parallel'\npp_size = " + std::to_string(S) + "\nnum_microbatches = " +
          std::to_string(S) + "\nprecision = '" + prec + "'\nzero_stage = " + std::to_string(zero) + "\n"));
      Booster booster(std::make_shared<plugins::HybridParallelPlugin>(o));
      auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.05}));
      for (int step = 0; step < 2; ++step) {
        auto [x, y] = images(2 * S, 20 + uint64_t(step));
        b.optimizer->zero_grad();
        booster.execute_pipeline(once(x, y), *b.model, ce(), b.optimizer.get());
        b.optimizer->step();
      }
      trained[prec + std::to_string(zero)] = model;
    }
  }
  for (auto& [name, m] : trained) {
    double err = 0, scale = 1e-2;
    for (auto& [n, p] : vit()->named_parameters()) {
      auto a = testkit::logical_param(*m, n).to_vector(), w = testkit::logical_param(*trained["fp320"], n).to_vector();
      for (size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, double(std::abs(a[i] - w[i])));
        scale = std::max(scale, double(std::abs(w[i])));
      }
    }
    EXPECT_LE(err / scale, 3e-2) << name;
    if (name == "fp320" || name == "fp321") {
      EXPECT_LE(err / scale, 1e-5) << name;
    }
  }
}

// 3-D parallelism: tp2 x pp2 x dp2 on 8 ranks (ZeRO-2 and DDP over dp) trains like one
// process on the global batch.
TEST(Pipeline, ThreeDimensionsTrainAsOneProcess) {
  if (dist::world_size() != 8) GTEST_SKIP() << "tp2 x pp2 x dp2 needs 8 ranks";
  for (int zero : {0, 2}) {
    SCOPED_TRACE("zero_stage " + std::to_string(zero));
    auto c = testkit::tiny_vit(4);
    auto ref = vit(), model = vit();
    optim::SGD ref_opt(ref->named_parameters(), {0.05, 0.9});
    Booster booster(pipeline("tp_size = 2\npp_size = 2\nnum_microbatches = 2\nzero_stage = " + std::to_string(zero) + "\n"));
    auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.05, 0.9}));
    const int dp = booster.plugin()->dp_size(), dp_rank = booster.plugin()->dp_rank();
    ASSERT_EQ(dp, 2);
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = images(8, 40 + uint64_t(step));
      ref_opt.zero_grad();
      (*ref)(x, y).loss.backward();
      ref_opt.step();
      b.optimizer->zero_grad();
      booster.execute_pipeline(once(x.narrow(0, dp_rank * 4, 4).contiguous(), y.narrow(0, dp_rank * 4, 4).contiguous()),
                               *b.model, ce(), b.optimizer.get());
      b.optimizer->step();
    }
    for (auto& [n, p] : ref->named_parameters()) {
      auto got = testkit::logical_param(*model, n).to_vector(), want = p.to_vector();
      double err = 0, scale = 1e-3;
      for (size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, double(std::abs(got[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
      }
      EXPECT_LE(err, 1e-5 * scale) << n;
    }
  }
}


// Zero bubble V measures its passes on the first training step (every stage the same
// figures) and its costs go with the optimizer's checkpoint: the resumed run simulates the
// same orders. A cost that is not one is refused naming it.
TEST(Pipeline, ZeroBubbleCostsAreMeasuredAndGoWithTheOptimizerCheckpoint) {
  const int S = dist::world_size();
  if (S != 2) GTEST_SKIP() << "the 4-layer test ViT fills the V's 2 x pp_size slots on 2 ranks";
  const std::string cfg = "pp_size = " + std::to_string(S) + "\npp_style = 'zbv'\nnum_model_chunks = 2\nnum_microbatches = 4\n";
  auto plugin = pipeline(cfg);
  auto model = vit();
  Booster booster(plugin);
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, 0.9}));
  const auto* zbv = dynamic_cast<const pipeline::ZeroBubbleVSchedule*>(plugin->pipeline_schedule());
  ASSERT_NE(zbv, nullptr);
  EXPECT_FALSE(zbv->costs().has_value()) << "nothing measured before the first step";
  auto [x, y] = images(4, 1);
  booster.execute_pipeline(once(x, y), *b.model, ce(), b.optimizer.get());
  b.optimizer->step();
  ASSERT_TRUE(zbv->costs().has_value());
  const pipeline::ZeroBubbleCosts measured = *zbv->costs();
  EXPECT_GT(measured.f, 0);
  EXPECT_GT(measured.b, 0);
  EXPECT_GT(measured.w, 0);
  EXPECT_GT(measured.comm, 0) << "a message between the two stages is timed";
  char mine[96];
  std::snprintf(mine, sizeof mine, "%.17g %.17g %.17g", measured.f, measured.b, measured.w);
  for (auto& theirs : dist::all_gather_bytes(mine)) EXPECT_EQ(theirs, mine) << "every stage simulates the same pipeline";
  const std::string dir = dist::all_gather_bytes(testkit::temp_path("zbv_costs").string())[0];
  booster.save_optimizer(*b.optimizer, dir, true);
  auto plugin2 = pipeline(cfg);
  auto model2 = vit();
  Booster resumed(plugin2);
  auto b2 = resumed.boost(model2, std::make_shared<optim::SGD>(model2->named_parameters(), optim::SGDOptions{0.1, 0.9}));
  resumed.load_optimizer(*b2.optimizer, dir);
  const auto* zbv2 = dynamic_cast<const pipeline::ZeroBubbleVSchedule*>(plugin2->pipeline_schedule());
  ASSERT_TRUE(zbv2->costs().has_value());
  EXPECT_TRUE(*zbv2->costs() == measured);
  const auto a = zbv->order(4, false), c = zbv2->order(4, false);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a[i].forward == c[i].forward && a[i].chunk == c[i].chunk && a[i].microbatch == c[i].microbatch &&
                a[i].part == c[i].part) << "pass " << i;
  optim::OptimizerStateDict sd = b2.optimizer->state_dict();
  sd.extra["zbv_cost_b"] = -1.0;
  EXPECT_NE(testkit::error_of([&] { b2.optimizer->load_state_dict(sd); }).find("zbv_cost_b = -1"), std::string::npos);
  dist::barrier();
  if (dist::world_rank() == 0) std::filesystem::remove_all(dir);
}

// The V puts the embeddings (the first chunk) and the head tied to them (the last chunk) on
// stage 0, and the schedule decides how the two chunks' passes interleave there: the tied
// gradient is the same, to the bit, whatever order the costs made (each chunk's
// contributions summed apart, then chunk 0's plus chunk 1's).
TEST(Pipeline, ZeroBubbleTiedGradientIsTheSameInEveryOrder) {
  if (dist::world_size() != 2) GTEST_SKIP() << "a 4-block GPT-2 fills the V's 2 x pp_size slots on 2 ranks";
  auto run = [](const pipeline::ZeroBubbleCosts& costs, std::vector<PipelineSchedule::Op>* ops) {
    auto plugin = pipeline("pp_size = 2\npp_style = 'zbv'\nnum_model_chunks = 2\nnum_microbatches = 4\n");
    manual_seed(9);
    nn::GPT2Config c = nn::GPT2Config::preset("gpt2-tiny");
    c.n_layer = 4;
    auto model = std::make_shared<nn::GPT2LMHeadModel>(c);
    Booster booster(plugin);
    auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, 0.9}));
    optim::OptimizerStateDict sd = b.optimizer->state_dict();
    sd.extra["zbv_cost_f"] = costs.f, sd.extra["zbv_cost_b"] = costs.b, sd.extra["zbv_cost_w"] = costs.w;
    sd.extra["zbv_cost_comm"] = costs.comm;
    b.optimizer->load_state_dict(sd);  // the costs a checkpoint would bring: the order follows them
    *ops = plugin->pipeline_schedule()->order(4, false);
    Tensor ids = Tensor::empty({8, 6}, DType::i64);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % c.vocab_size;
    StageCriterion lm = on_keys([](const Tensor& l, const Tensor& t) {
      return cross_entropy(l.reshape({-1, l.size(-1)}), t.reshape({-1}));
    });
    booster.execute_pipeline(single_batch({{"input_ids", ids}, {"labels", ids}}), *b.model, lm, b.optimizer.get());
    Tensor wte = model->get_tensor("transformer.wte.weight");
    return wte.defined() ? wte.grad().clone() : Tensor();
  };
  std::vector<PipelineSchedule::Op> even, skewed;
  const Tensor a = run({1, 1, 1, 0}, &even), b = run({1, 3, 0.2, 0.5}, &skewed);
  if (dist::world_rank() != 0) return;  // stage 0 holds both chunks of the tie
  ASSERT_TRUE(a.defined() && b.defined());
  bool differ = even.size() != skewed.size();
  for (size_t i = 0; !differ && i < even.size(); ++i)
    differ = even[i].forward != skewed[i].forward || even[i].chunk != skewed[i].chunk ||
             even[i].microbatch != skewed[i].microbatch || even[i].part != skewed[i].part;
  ASSERT_TRUE(differ) << "the two costs must make two orders, or nothing is tested";
  EXPECT_EQ(testkit::max_abs_diff(a, b), 0.0f);
}

}  // namespace
