// The Trainer and its hooks: the same weights as a hand-written loop under each plugin, the
// hook order and events, exceptions, gradient accumulation, the scheduler hook, clipping,
// metrics that read the same twice and count every row once (padding included: the shards
// of an odd split under ZeRO-3), checkpoints that resume exactly. Runs under mpirun -np 1, 2.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "booster/trainer/checkpoint_hook.h"
#include "booster/trainer/hooks.h"
#include "core/common/file_util.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "nn/vit.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "plugins/registry.h"
#include "tests/support/fixtures.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

// Sample i: a 3x8x8 image of normal noise seeded by i, label i mod 3.
class NoiseImages : public data::Dataset {
 public:
  explicit NoiseImages(size_t n) : n_(n) {}
  size_t size() const override { return n_; }
  data::Example get(size_t i, Generator&) const override {
    Tensor x = Tensor::empty({3, 8, 8});
    Generator(500 + i).normal_(x);
    return data::image_example(x, int64_t(i % 3));
  }

 private:
  size_t n_;
};

const char* kDDP = "[plugin]\nname = 'torch_ddp'\n";
const char* kZero2 = "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n";
const char* kGemini = "[plugin]\nname = 'gemini'\nprecision = 'fp32'\nmin_chunk_size_m = 0.002\nsearch_range_m = 0.004\n";

std::shared_ptr<Plugin> plugin_of(const std::string& toml) {
  return toml.empty() ? nullptr : plugins::make_plugin(Config::from_string(toml, "test.toml"));
}

Criterion ce() {
  return [](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); };
}

// A run's objects, boosted: the tiny ViT, SGD, a cosine schedule and the training loader.
struct TinyRun {
  Booster booster;
  BoostResult<nn::ViTForImageClassification> r;
  TinyRun(const std::string& toml, size_t images, int64_t batch, double momentum = 0.0)
      : booster(plugin_of(toml)) {
    manual_seed(7);
    auto model = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
    auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, momentum});
    data::DataLoaderOptions lo;
    lo.batch_size = batch;
    lo.drop_last = true;
    auto ds = std::make_shared<NoiseImages>(images);
    auto loader = booster.plugin() ? booster.plugin()->prepare_dataloader(ds, lo)
                                   : std::make_shared<data::DataLoader>(ds, lo, std::make_shared<data::DistributedSampler>(
                                                                                    images, dist::world_size(),
                                                                                    dist::world_rank(), false));
    auto sched = std::make_shared<optim::CosineAnnealingLR>(*opt, 20);
    r = booster.boost(model, opt, ce(), loader, sched);
  }
  std::vector<float> weights() const {
    std::vector<float> all;
    for (auto& [name, p] : r.model.unwrap()->named_parameters()) {
      auto v = p.to(DType::f32).to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

// A hook that records its events as "<tag>:<event>".
class Recorder : public BaseHook {
 public:
  Recorder(std::string tag, int priority, std::vector<std::string>& log) : BaseHook(priority), tag_(std::move(tag)), log_(log) {}
  void before_train(Trainer&) override { add("before_train"); }
  void after_train(Trainer&) override { add("after_train"); }
  void before_train_epoch(Trainer&) override { add("before_train_epoch"); }
  void after_train_epoch(Trainer&) override { add("after_train_epoch"); }
  void before_train_iter(Trainer&) override { add("before_train_iter"); }
  void after_train_iter(Trainer& t, const IterationOutput&) override {
    add("after_train_iter");
    if (throw_at_ == t.cur_step()) throw ValueError("thrown at step " + std::to_string(t.cur_step()));
  }
  void before_test(Trainer&) override { add("before_test"); }
  void after_test(Trainer&) override { add("after_test"); }
  void before_test_epoch(Trainer&) override { add("before_test_epoch"); }
  void after_test_epoch(Trainer&) override { add("after_test_epoch"); }
  void before_test_iter(Trainer&) override { add("before_test_iter"); }
  void after_test_iter(Trainer&, const IterationOutput&) override { add("after_test_iter"); }
  void on_exception(Trainer&, const std::exception& e) override { add(std::string("on_exception ") + e.what()); }
  int64_t throw_at_ = -1;

 private:
  void add(const std::string& e) { log_.push_back(tag_ + ":" + e); }
  std::string tag_;
  std::vector<std::string>& log_;
};

std::shared_ptr<data::DataLoader> eval_loader(size_t images, int64_t batch, int replicas, int rank) {
  data::DataLoaderOptions lo;
  lo.batch_size = batch;
  return std::make_shared<data::DataLoader>(std::make_shared<NoiseImages>(images), lo,
                                            std::make_shared<data::InferenceShardSampler>(images, replicas, rank));
}

int64_t argmax_row(const Tensor& logits) {
  auto v = logits.to(DType::f32).to_vector();
  return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// A folder every rank agrees on (rank 0's temp path).
std::string shared_dir(const std::string& tag) {
  return dist::all_gather_bytes(testkit::temp_path(tag).string())[0];
}

}  // namespace

TEST(Trainer, FitGivesTheWeightsOfAHandWrittenLoop) {
  for (const std::string& toml : {std::string(), std::string(kDDP), std::string(kZero2)}) {
    TinyRun a(toml, 24, 2), b(toml, 24, 2);
    Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion);
    t.fit({.train_dataloader = a.r.dataloader, .epochs = 2,
           .hooks = {std::make_shared<LRSchedulerHook>(a.r.lr_scheduler, false)}});
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      b.r.dataloader->set_epoch(epoch);
      b.r.dataloader->begin_epoch();
      while (auto batch = b.r.dataloader->next()) {
        b.booster.execute_pipeline(single_batch(*batch),
                                   b.r.model, on_keys(b.r.criterion), b.r.optimizer.get());
        b.r.optimizer->step();
        b.r.optimizer->zero_grad();
        b.r.lr_scheduler->step();
      }
    }
    EXPECT_EQ(max_diff(a.weights(), b.weights()), 0.0) << "plugin: " << toml;
    EXPECT_EQ(t.cur_step(), 2 * int64_t(a.r.dataloader->size()));
    EXPECT_EQ(a.r.lr_scheduler->last_epoch(), t.cur_step());
  }
}

TEST(Trainer, HooksRunByPriorityAtEveryEvent) {
  std::vector<std::string> log;
  TinyRun a("", 8 * size_t(dist::world_size()), 4);
  Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion);
  auto late = std::make_shared<Recorder>("late", 5, log), early = std::make_shared<Recorder>("early", 1, log),
       tie = std::make_shared<Recorder>("tie", 1, log);
  t.fit({.train_dataloader = a.r.dataloader, .epochs = 1, .test_dataloader = eval_loader(4, 4, 1, 0),
         .hooks = {late, early, tie}});
  std::vector<std::string> want;
  auto all = [&](const std::string& e) {
    for (const char* tag : {"early", "tie", "late"}) want.push_back(std::string(tag) + ":" + e);
  };
  all("before_train"), all("before_train_epoch");
  for (int i = 0; i < 2; ++i) all("before_train_iter"), all("after_train_iter");
  all("after_train_epoch"), all("before_test"), all("before_test_epoch"), all("before_test_iter"), all("after_test_iter");
  all("after_test_epoch"), all("after_test"), all("after_train");
  EXPECT_EQ(log, want);
}

TEST(Trainer, EveryHookHearsAnExceptionAndItLeavesFit) {
  std::vector<std::string> log;
  TinyRun a("", 8 * size_t(dist::world_size()), 2);
  Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion);
  auto thrower = std::make_shared<Recorder>("a", 0, log), other = std::make_shared<Recorder>("b", 1, log);
  thrower->throw_at_ = 2;
  const std::string err = testkit::error_of([&] { t.fit({.train_dataloader = a.r.dataloader, .epochs = 3, .hooks = {thrower, other}}); });
  EXPECT_NE(err.find("thrown at step 2"), std::string::npos) << err;
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[log.size() - 2], "a:on_exception thrown at step 2");
  EXPECT_EQ(log[log.size() - 1], "b:on_exception thrown at step 2");
  EXPECT_EQ(t.cur_step(), 2);
}

// K accumulated batches of b rows make the step of one batch of K b rows, under every plugin
// (DDP, ZeRO-2, FSDP and HybridParallel's tp and pp skip the sync under no_sync; Gemini
// without enable_gradient_accumulation reduces every batch and accumulates the reduced
// gradients).
TEST(Trainer, GradientAccumulationMatchesTheLargerBatch) {
  const std::string hybrid = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\n";
  const std::string fsdp = "[plugin]\nname = 'torch_fsdp'\n";
  std::vector<std::string> cases = {"", kDDP, kZero2, kGemini, fsdp};
  if (dist::world_size() % 2 == 0) cases.insert(cases.end(), {hybrid + "tp_size = 2\n", hybrid + "pp_size = 2\nnum_microbatches = 2\n"});
  for (const std::string& toml : cases) {
    const size_t images = 16 * size_t(dist::world_size());
    TinyRun small(toml, images, 2), large(toml, images, 4);
    TrainerOptions acc;
    acc.gradient_accumulation = 2;
    Trainer ts(small.booster, small.r.model, small.r.optimizer, small.r.criterion, acc);
    Trainer tl(large.booster, large.r.model, large.r.optimizer, large.r.criterion);
    auto loss_s = std::make_shared<LossHook>(), loss_l = std::make_shared<LossHook>();
    ts.fit({.train_dataloader = small.r.dataloader, .epochs = 1, .hooks = {loss_s}});
    tl.fit({.train_dataloader = large.r.dataloader, .epochs = 1, .hooks = {loss_l}});
    EXPECT_EQ(ts.cur_step(), int64_t(small.r.dataloader->size())) << toml;
    EXPECT_EQ(tl.cur_step() * 2, ts.cur_step()) << toml;
    // Gemini and FSDP keep their parameters in chunks, not in the module: their loss is
    // compared. Tensor and pipeline ranks compare what they hold, each the same part.
    if (toml != kGemini && toml != fsdp) {
      EXPECT_LT(max_diff(small.weights(), large.weights()), 2e-6) << "plugin: " << toml;
    }
    // The epoch's mean loss is over the same rows, in both (each batch's loss unscaled).
    EXPECT_NEAR(ts.metric(Mode::train, "Loss").accumulated_value(), tl.metric(Mode::train, "Loss").accumulated_value(),
                1e-5)
        << "plugin: " << toml;
  }
}

// The scheduler steps once per optimizer step, or once per whole epoch, whatever the
// accumulation (the legacy one advanced once per K epochs); LR holds the rate after it.
TEST(Trainer, SchedulerHookStepsPerOptimizerStepOrPerEpoch) {
  for (bool by_epoch : {false, true}) {
    TinyRun a("", 16 * size_t(dist::world_size()), 2);  // 8 batches an epoch
    TrainerOptions acc;
    acc.gradient_accumulation = 2;
    Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion, acc);
    t.fit({.train_dataloader = a.r.dataloader, .epochs = 2,
           .hooks = {std::make_shared<LRSchedulerHook>(a.r.lr_scheduler, by_epoch)}});
    EXPECT_EQ(a.r.lr_scheduler->last_epoch(), by_epoch ? 2 : 8);
    EXPECT_EQ(t.metric(Mode::train, "LR").last_step_value(), a.r.lr_scheduler->get_last_lr()[0]);
  }
}

TEST(Trainer, MaxStepsStopsAtAnOptimizerStepAndClipZeroIsOff) {
  TinyRun a("", 16 * size_t(dist::world_size()), 2), b("", 16 * size_t(dist::world_size()), 2),
      c("", 16 * size_t(dist::world_size()), 2);
  const auto before = a.weights();
  TrainerOptions acc;
  acc.gradient_accumulation = 2;
  Trainer ta(a.booster, a.r.model, a.r.optimizer, a.r.criterion, acc);
  ta.fit({.train_dataloader = a.r.dataloader, .epochs = 5, .max_steps = 3});
  EXPECT_EQ(ta.cur_step(), 4);  // 3 rounded up to the step that ends its window
  EXPECT_TRUE(ta.stepped());
  EXPECT_EQ(ta.cur_epoch(), 0);
  EXPECT_EQ(ta.position(), 4);
  // clip_grad_norm 0: the weights move as without clipping (the legacy engine zeroed them).
  TrainerOptions clip0 = acc, tiny = acc;
  clip0.clip_grad_norm = 0.0, tiny.clip_grad_norm = 1e-4;
  Trainer tb(b.booster, b.r.model, b.r.optimizer, b.r.criterion, clip0);
  Trainer tc(c.booster, c.r.model, c.r.optimizer, c.r.criterion, tiny);
  tb.fit({.train_dataloader = b.r.dataloader, .epochs = 5, .max_steps = 3});
  tc.fit({.train_dataloader = c.r.dataloader, .epochs = 5, .max_steps = 3});
  EXPECT_EQ(max_diff(a.weights(), b.weights()), 0.0);
  EXPECT_GT(max_diff(before, b.weights()), 1e-3);
  // Two steps of lr 0.1 with the gradient's norm at most 1e-4: each weight moves <= 2e-5.
  EXPECT_LE(max_diff(before, c.weights()), 2e-5 + 1e-9);
  EXPECT_GT(max_diff(before, c.weights()), 0.0);
}

// Every image of an odd split counted once, under DDP and under Gemini (ZeRO-3), where the
// shorter shards are padded so every rank runs as many forwards; a metric read twice reads
// the same (the legacy metrics all-reduced on every read).
TEST(Trainer, EvaluateCountsEveryRowOnceAndMetricsReadTheSameTwice) {
  const size_t images = 5;  // 2 ranks, batch 2: 3 and 2 rows, 2 and 1 batches without padding
  for (const std::string& toml : {std::string(kDDP), std::string(kGemini)}) {
    TinyRun a(toml, 8, 2);
    Trainer t(a.booster, a.r.model, nullptr, a.r.criterion);
    auto acc = std::make_shared<AccuracyHook>(nullptr, 0, 3);
    t.evaluate(*eval_loader(images, 2, a.booster.plugin()->dp_size(), a.booster.plugin()->dp_rank()),
               {std::make_shared<LossHook>(), acc});
    // The same images through the whole model on one process.
    NoGradGuard ng;
    TinyRun whole("", 8, 2);
    double loss = 0, correct = 0;
    for (size_t i = 0; i < images; ++i) {
      auto ex = NoiseImages(images).get(i, default_generator());
      auto out = (*whole.r.model)(ex.at("pixel_values").view({1, 3, 8, 8}));
      loss += cross_entropy(out.logits, Tensor::from_ints({data::example_label(ex)}, {1})).item();
      correct += argmax_row(out.logits) == data::example_label(ex);
    }
    const Metric& m = t.metric(Mode::test, "Loss");
    EXPECT_EQ(dynamic_cast<const LossMetric&>(m).samples(), int64_t(images)) << toml;
    EXPECT_EQ(acc->metric().samples(), int64_t(images)) << toml;
    EXPECT_NEAR(m.accumulated_value(), loss / double(images), 1e-5) << toml;
    EXPECT_EQ(m.accumulated_value(), m.accumulated_value());
    EXPECT_NEAR(acc->metric().accumulated_value(), correct / double(images), 1e-12) << toml;
    int64_t confusion_total = 0;
    for (auto& row : acc->metric().confusion())
      for (int64_t c : row) confusion_total += c;
    EXPECT_EQ(confusion_total, int64_t(images));
  }
}

TEST(Trainer, LogHooksReportWhatTheMetricHooksRecorded) {
  const auto dir = shared_dir("trainer_tb");
  TinyRun a(kDDP, 8 * size_t(dist::world_size()), 2);
  Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion);
  t.fit({.train_dataloader = a.r.dataloader,
         .epochs = 2,
         .test_dataloader = eval_loader(6, 2, dist::world_size(), dist::world_rank()),
         .hooks = {std::make_shared<LogMetricByStepHook>(), std::make_shared<ThroughputHook>(1),
          std::make_shared<LRSchedulerHook>(a.r.lr_scheduler, false), std::make_shared<LossHook>(),
          std::make_shared<AccuracyHook>(), std::make_shared<TensorboardHook>(dir),
          std::make_shared<LogMetricByEpochHook>(), std::make_shared<LogTimingByEpochHook>(),
          std::make_shared<LogMemoryByEpochHook>(1, 10, true, true)}});
  auto& shown = t.step_metrics(Mode::train);
  ASSERT_EQ(shown.count("Loss") + shown.count("LR") + shown.count("Throughput"), 3u);
  EXPECT_EQ(shown["Loss"], t.metric(Mode::train, "Loss").last_step_value());  // the last step's, after its hook ran
  EXPECT_GT(shown["Throughput"], 0.0);
  EXPECT_GT(t.metric(Mode::train, "Throughput").accumulated_value(), 0.0);
  EXPECT_EQ(t.timer().count("Train-epoch"), 2u);
  EXPECT_EQ(t.timer().count("Train-step"), size_t(2 * a.r.dataloader->size()));
  if (dist::world_rank() == 0) {
    ASSERT_TRUE(fs::is_directory(fs::path(dir) / "rank_0"));
    std::string events;
    for (auto& e : fs::directory_iterator(fs::path(dir) / "rank_0")) events += read_text_file(e.path().string());
    for (const char* tag : {"Loss/train", "LR/train", "Throughput/train", "Loss/test", "Accuracy/test"})
      EXPECT_NE(events.find(tag), std::string::npos) << tag;
  }
  dist::barrier();
  if (dist::world_rank() == 0) fs::remove_all(dir);
}

// Killed after 5 iterations (max_steps stands in for the kill) and resumed from its
// checkpoints: the weights of the run that went through, and the Trainer's records back.
// With use_async (the checkpoints written behind training) the same, under DDP and ZeRO-2.
TEST(Trainer, CheckpointHookResumesExactly) {
  for (auto [plugin, use_async] : {std::pair{kDDP, false}, std::pair{kDDP, true}, std::pair{kZero2, true}}) {
  SCOPED_TRACE(std::string(plugin) + (use_async ? "use_async" : "synchronous"));
  const auto dir = shared_dir("trainer_ckpt");
  auto hook = [&](TinyRun& r, const std::string& resume) {
    SaveCheckpointOptions o;
    o.interval = 3, o.save_by_iter = true, o.checkpoint_dir = dir, o.lr_scheduler = r.r.lr_scheduler, o.resume = resume;
    o.keep_last = 2, o.use_async = use_async;
    return std::make_shared<SaveCheckpointHook>(o);
  };
  const size_t images = 12 * size_t(dist::world_size());  // 6 batches an epoch
  TinyRun full(plugin, images, 2, 0.9), killed(plugin, images, 2, 0.9), resumed(plugin, images, 2, 0.9);
  Trainer tf(full.booster, full.r.model, full.r.optimizer, full.r.criterion);
  tf.fit({.train_dataloader = full.r.dataloader, .epochs = 2,
          .hooks = {std::make_shared<LRSchedulerHook>(full.r.lr_scheduler, false)}});
  Trainer tk(killed.booster, killed.r.model, killed.r.optimizer, killed.r.criterion);
  tk.records()["best"] = 0.75;
  tk.fit({.train_dataloader = killed.r.dataloader, .epochs = 2, .max_steps = 8, .hooks = {std::make_shared<LRSchedulerHook>(killed.r.lr_scheduler, false),
                                                 hook(killed, "")}});
  if (dist::world_rank() == 0) {  // saved at 3, 6 and at the end (8); keep_last 2
    std::vector<std::string> steps;
    for (auto& e : fs::directory_iterator(dir)) steps.push_back(e.path().filename().string());
    std::sort(steps.begin(), steps.end());
    EXPECT_EQ(steps, (std::vector<std::string>{"step-00000006", "step-00000008"}));
  }
  Trainer tr(resumed.booster, resumed.r.model, resumed.r.optimizer, resumed.r.criterion);
  tr.fit({.train_dataloader = resumed.r.dataloader, .epochs = 2, .hooks = {std::make_shared<LRSchedulerHook>(resumed.r.lr_scheduler, false),
                                                  hook(resumed, dir)}});
  EXPECT_TRUE(tr.resumed());
  EXPECT_EQ(tr.records()["best"], 0.75);
  EXPECT_EQ(tr.cur_step(), tf.cur_step());
  EXPECT_EQ(max_diff(full.weights(), resumed.weights()), 0.0);
  EXPECT_EQ(resumed.r.lr_scheduler->last_epoch(), full.r.lr_scheduler->last_epoch());
  dist::barrier();
  if (dist::world_rank() == 0) fs::remove_all(dir);
  }
}

// Saved at batch 2 and resumed at batch 1 with 2 accumulated (the global batch kept, as a
// resume on twice the replicas runs): the same optimizer steps over the same samples, so the
// weights of the run that went through; at batch 1 alone (another global batch) it is refused
// before anything loads.
TEST(Trainer, CheckpointHookResumesOnAnotherLayoutWithTheSameGlobalBatch) {
  const auto dir = shared_dir("trainer_relaid");
  auto hook = [&](TinyRun& r, const std::string& resume) {
    SaveCheckpointOptions o;
    o.interval = 2, o.save_by_iter = true, o.checkpoint_dir = dir, o.lr_scheduler = r.r.lr_scheduler, o.resume = resume;
    return std::make_shared<SaveCheckpointHook>(o);
  };
  auto sched = [](TinyRun& r) { return std::make_shared<LRSchedulerHook>(r.r.lr_scheduler, false); };
  const size_t images = 12 * size_t(dist::world_size());  // 6 batches of 2 an epoch
  TinyRun full(kDDP, images, 2, 0.9), killed(kDDP, images, 2, 0.9), relaid(kDDP, images, 1, 0.9), other(kDDP, images, 1, 0.9);
  Trainer tf(full.booster, full.r.model, full.r.optimizer, full.r.criterion);
  tf.fit({.train_dataloader = full.r.dataloader, .epochs = 2, .hooks = {sched(full)}});
  Trainer tk(killed.booster, killed.r.model, killed.r.optimizer, killed.r.criterion);
  tk.fit({.train_dataloader = killed.r.dataloader, .epochs = 2, .max_steps = 8, .hooks = {sched(killed), hook(killed, "")}});

  Trainer to(other.booster, other.r.model, other.r.optimizer, other.r.criterion);  // batch 1, nothing accumulated
  const std::vector<float> before = other.weights();
  try {
    to.fit({.train_dataloader = other.r.dataloader, .epochs = 2, .hooks = {sched(other), hook(other, dir)}});
    ADD_FAILURE() << "a resume on another global batch was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("the same global batch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("global batch " + std::to_string(2 * dist::world_size())), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(max_diff(before, other.weights()), 0.0);  // refused before the model loaded

  Trainer tr(relaid.booster, relaid.r.model, relaid.r.optimizer, relaid.r.criterion, {.gradient_accumulation = 2});
  tr.fit({.train_dataloader = relaid.r.dataloader, .epochs = 2, .hooks = {sched(relaid), hook(relaid, dir)}});
  EXPECT_TRUE(tr.resumed());
  EXPECT_EQ(tr.optimizer_steps(), tf.optimizer_steps());
  EXPECT_EQ(tr.cur_step(), 2 * tf.cur_step());
  EXPECT_LT(max_diff(full.weights(), relaid.weights()), 2e-6);
  EXPECT_EQ(relaid.r.lr_scheduler->last_epoch(), full.r.lr_scheduler->last_epoch());
  dist::barrier();
  if (dist::world_rank() == 0) fs::remove_all(dir);
}

TEST(DataLayout, BatchKeepingMakesUpWithAccumulationOrASmallerBatch) {
  auto plan = [](int64_t g, int64_t dp, int64_t b) {
    const BatchPlan p = batch_keeping(g, dp, b);
    return std::pair{p.batch_size, p.gradient_accumulation};
  };
  EXPECT_EQ(plan(16, 1, 8), (std::pair<int64_t, int64_t>{8, 2}));   // fewer replicas: accumulate
  EXPECT_EQ(plan(16, 4, 8), (std::pair<int64_t, int64_t>{4, 1}));   // more: a smaller batch
  EXPECT_EQ(plan(24, 2, 8), (std::pair<int64_t, int64_t>{6, 2}));   // the largest batch dividing the share
  EXPECT_EQ(plan(16, 2, 8), (std::pair<int64_t, int64_t>{8, 1}));
  EXPECT_THROW(batch_keeping(16, 3, 8), ValueError);                // 16 does not divide over 3
}

TEST(Trainer, BadArgumentsAreNamed) {
  TinyRun a("", 8 * size_t(dist::world_size()), 2);
  TrainerOptions zero;
  zero.gradient_accumulation = 0;
  EXPECT_NE(testkit::error_of([&] { Trainer(a.booster, a.r.model, a.r.optimizer, a.r.criterion, zero); })
                .find("gradient_accumulation must be >= 1"),
            std::string::npos);
  Trainer no_opt(a.booster, a.r.model, nullptr, a.r.criterion);
  EXPECT_NE(testkit::error_of([&] { no_opt.fit({.train_dataloader = a.r.dataloader}); }).find("needs an optimizer"), std::string::npos);
  Trainer t(a.booster, a.r.model, a.r.optimizer, a.r.criterion);
  EXPECT_NE(testkit::error_of([&] {
              t.fit({.train_dataloader = a.r.dataloader, .hooks = {std::make_shared<LossHook>(), std::make_shared<LossHook>()}});
            }).find("two hooks add the train metric 'Loss'"),
            std::string::npos);
  t.fit({.train_dataloader = a.r.dataloader, .hooks = {std::make_shared<LossHook>()}});
  const std::string err = testkit::error_of([&] { t.metric(Mode::test, "Accuracy"); });
  EXPECT_NE(err.find("no test metric 'Accuracy' (there are: Loss)"), std::string::npos) << err;
  TrainerOptions big;
  big.gradient_accumulation = 100;
  Trainer tb(a.booster, a.r.model, a.r.optimizer, a.r.criterion, big);
  EXPECT_NE(testkit::error_of([&] { tb.fit({.train_dataloader = a.r.dataloader}); }).find("fewer than one optimizer step"),
            std::string::npos);
}
