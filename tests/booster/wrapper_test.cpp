// The Booster seams, with a plugin written in the test: what configure() produces is what
// boost() returns; wrappers chain (the plugin's, then mixed precision around it) and each
// layer's forward, checkpoint and step behaviour composes with the others; a model runs
// as pipeline stages through its wrapper.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "booster/booster.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/checkpoint/tensor_store.h"
#include "booster/mixed_precision.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "tests/support/fixtures.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

nn::ViTConfig small() { return testkit::tiny_vit(2); }

// A plugin's model wrapper: counts forwards and saves the count with the model.
class CountingModel : public ModelWrapper {
 public:
  explicit CountingModel(std::shared_ptr<ModelWrapper> inner) : ModelWrapper(std::move(inner)) {}
  std::string type_name() const override { return "CountingModel"; }
  void before_forward() override {
    ModelWrapper::before_forward();
    calls.fill_(calls.item() + 1);
  }
  ShardedState checkpoint_state() override {
    auto s = ModelWrapper::checkpoint_state();
    s.push_back({"counting.calls", calls, Region::whole({})});
    return s;
  }
  Tensor calls = Tensor::zeros({});
};

// A plugin's optimizer decorator: counts the steps that pass through it.
class CountingOptimizer : public OptimizerDecorator {
 public:
  using OptimizerDecorator::OptimizerDecorator;
  std::string type_name() const override { return "CountingOptimizer"; }
  void step() override {
    ++steps;
    OptimizerDecorator::step();
  }
  int steps = 0;
};

class CountingPlugin : public Plugin {
 public:
  std::string name() const override { return "counting"; }
  std::vector<std::string> supported_precisions() const override { return {"bf16", "fp16"}; }
  bool control_precision() const override { return false; }
  bool control_checkpoint_io() const override { return false; }
  bool support_no_sync() const override { return false; }
  void configure(BoostedObjects& o) override {
    o.model = std::make_shared<CountingModel>(o.model);
    if (o.optimizer) o.optimizer = std::make_shared<CountingOptimizer>(o.optimizer);
  }
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override { return nullptr; }
};

fs::path temp(const std::string& name) { return testkit::temp_path("wrap_" + name); }

}  // namespace

TEST(Wrappers, BoostReturnsThePluginsChain) {
  manual_seed(1);
  auto model = std::make_shared<nn::ViTForImageClassification>(small());
  auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1});
  Booster booster(std::make_shared<CountingPlugin>(), "bf16");
  auto b = booster.boost(model, opt);
  // Mixed precision wraps the plugin's wrapper; the plugin's wraps the module.
  EXPECT_EQ(b.model->type_name(), "MixedPrecisionModel");
  ASSERT_NE(b.model->find<CountingModel>(), nullptr);
  EXPECT_EQ(b.model->inner()->type_name(), "CountingModel");
  EXPECT_EQ(b.model.unwrap(), model);
  // The plugin's decorator stays outermost; mixed precision took the leaf.
  EXPECT_EQ(b.optimizer->type_name(), "CountingOptimizer");
  EXPECT_EQ(b.optimizer->inner()->type_name(), "MixedPrecisionOptimizer");
  EXPECT_EQ(b.optimizer->unwrap(), opt);

  Tensor x = Tensor::ones({2, 3, 8, 8}), y = Tensor::from_ints({0, 2}, {2});
  auto out = b.model(x, y);  // inputs cast to bf16 by the outer layer, counted by the inner
  EXPECT_EQ(out.logits.dtype(), DType::bf16);
  EXPECT_EQ(b.model->find<CountingModel>()->calls.item(), 1.0);
  const Tensor master = b.optimizer->find<MixedPrecisionOptimizer>()->masters().master("classifier.bias");
  const auto before = master.to_vector();
  booster.backward(out.loss, *b.optimizer);
  b.optimizer->step();
  EXPECT_EQ(b.optimizer->find<CountingOptimizer>()->steps, 1);  // the step passed through every layer
  EXPECT_NE(master.to_vector(), before);                         // and the leaf updated the masters
  EXPECT_EQ(model->get_tensor("classifier.bias").dtype(), DType::bf16);

  // A checkpoint holds both layers' state: the fp32 masters and the plugin's counter.
  const auto path = temp("chain").string();
  booster.save_model(*b.model, path);
  auto saved = ckpt::load_tensors(path, "model");
  bool counter = false;
  for (auto& [n, t] : saved.tensors) {
    if (n == "counting.calls") counter = t.item() == 1.0;
    if (n == "classifier.bias") {
      EXPECT_EQ(t.to_vector(), master.to_vector());
    }
    if (n != "counting.calls") {
      EXPECT_EQ(t.dtype(), DType::f32) << n;
    }
  }
  EXPECT_TRUE(counter);
  // Loading runs every layer's after_load: the counter comes back and the working copies
  // are refreshed from the loaded masters.
  manual_seed(2);
  auto model2 = std::make_shared<nn::ViTForImageClassification>(small());
  auto b2 = booster.boost(model2, std::make_shared<optim::SGD>(model2->named_parameters(), optim::SGDOptions{0.1}));
  booster.load_model(*b2.model, path);
  EXPECT_EQ(b2.model->find<CountingModel>()->calls.item(), 1.0);
  EXPECT_EQ(model2->get_tensor("classifier.bias").to_vector(), model->get_tensor("classifier.bias").to_vector());
  fs::remove(path);
}

TEST(Wrappers, ModelRunsAsPipelineStagesThroughItsWrapper) {
  manual_seed(1);
  auto model = std::make_shared<nn::ViTForImageClassification>(small());
  Booster booster(std::make_shared<CountingPlugin>(), "bf16");
  auto b = booster.boost(model);
  Tensor x = Tensor::ones({2, 3, 8, 8}), y = Tensor::from_ints({0, 2}, {2});
  TensorMap msg = b.model->stage_forward({{"pixel_values", x}}, {0, 1, true, false});
  EXPECT_EQ(msg.at("hidden_states").dtype(), DType::bf16);  // the batch was cast on the way in
  msg = b.model->stage_forward(msg, {1, 2, false, true});
  EXPECT_EQ(b.model->find<CountingModel>()->calls.item(), 2.0);
  const auto criterion = on_keys([](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); });
  Tensor loss = criterion(msg, {{"labels", y}});
  EXPECT_EQ(loss.to_vector(), b.model(x, y).loss.to_vector());
  // A model that is no pipeline says so.
  struct Plain : nn::UnaryModule {
    std::string type_name() const override { return "Plain"; }
    Tensor forward(const Tensor& t) override { return t; }
    std::shared_ptr<nn::Module> fresh() const override { return std::make_shared<Plain>(); }
  };
  auto plain = booster.boost(std::make_shared<Plain>());
  try {
    plain.model->stage_forward({{"input", x}}, {0, 1, true, true});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Plain cannot run as pipeline stages"), std::string::npos) << e.what();
  }
}
