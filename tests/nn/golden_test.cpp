// Parity with PyTorch on every golden case under BOOSTER_GOLDEN_DIR: logits, loss and the
// gradient of every parameter, with the tolerances of shared/golden/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "golden_util.h"
#include "nn/pretrained.h"
#include "nn/safetensors.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/sgd.h"

#include <fstream>
#include <nlohmann/json.hpp>

using namespace booster;
using namespace booster::nn;
using namespace booster::testing;
namespace fs = std::filesystem;

namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, double(std::abs(v)));
  return m;
}

// The gradient of an attention key bias is exactly zero; the reference holds noise there.
bool is_key_bias(const std::string& name) {
  static const std::string suffix = "attention.key.bias";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST(GoldenParity, ForwardAndGradients) {
  auto cases = golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases (folders with config.json) under " << golden_dir();
  int failed = 0;
  for (const auto& dir : cases) {
    const std::string name = fs::path(dir).filename().string();
    auto model = vit_from_pretrained(dir);
    model->eval();  // dropout off, as the reference ran
    SafetensorsFile input = load_safetensors((fs::path(dir) / "input.safetensors").string());
    SafetensorsFile expected = load_safetensors((fs::path(dir) / "expected.safetensors").string());
    auto out = (*model)(input.at("pixel_values"), input.at("labels"));
    out.loss.backward();

    ErrorReport report;
    report.check("logits", "logits", out.logits, expected.at("logits"), 1e-4);
    report.check("loss", "loss", out.loss.reshape({1}), expected.at("loss"), 1e-4);
    for (auto& [pname, p] : model->named_parameters()) {
      const std::string key = "grad." + pname;
      if (!expected.contains(key)) {
        report.failures.push_back(key + ": not in expected.safetensors");
        continue;
      }
      Tensor want = expected.at(key);
      if (!p.grad().defined()) {
        report.failures.push_back(pname + ": no gradient");
        continue;
      }
      const double tol = is_key_bias(pname) ? 1e-5 : 1e-5 + 1e-3 * max_abs(want);
      report.check("grad", key, p.grad(), want, tol);
    }
    if (!report.print(name)) ++failed;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " golden cases failed";
}

namespace {

// Runs `steps` optimizer steps on the case's batch from the initial weights; records the
// loss before each step.
template <typename MakeOpt>
std::shared_ptr<ViTForImageClassification> train(const std::string& dir, int steps, MakeOpt make_opt,
                                                 std::vector<float>* losses) {
  auto model = vit_from_pretrained(dir);
  model->eval();
  SafetensorsFile input = load_safetensors((fs::path(dir) / "input.safetensors").string());
  auto opt = make_opt(model->named_parameters());
  for (int i = 0; i < steps; ++i) {
    opt->zero_grad();
    Tensor loss = (*model)(input.at("pixel_values"), input.at("labels")).loss;
    if (losses) losses->push_back(float(loss.item()));
    loss.backward();
    opt->step();
  }
  return model;
}

}  // namespace

// After `steps` of AdamW, SGD (Nesterov) and LAMB with training.json's hyperparameters,
// every parameter matches within 3e-5 (the golden README's bound after optimizer steps:
// Adam and LAMB move near-zero-gradient elements by ~lr whatever their rounding; key
// biases: 2 lr steps).
TEST(GoldenParity, Optimizers) {
  auto cases = golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases under " << golden_dir();
  int failed = 0;
  for (const auto& dir : cases) {
    const std::string name = fs::path(dir).filename().string();
    std::ifstream tf(fs::path(dir) / "training.json");
    ASSERT_TRUE(tf.good()) << dir << ": no training.json";
    const auto tj = nlohmann::json::parse(tf);
    const int steps = tj.at("steps").get<int>();
    SafetensorsFile expected = load_safetensors((fs::path(dir) / "expected.safetensors").string());
    ErrorReport report;

    const auto& aj = tj.at("adamw");
    optim::AdamOptions ao;
    ao.lr = aj.at("lr"), ao.beta1 = aj.at("betas")[0], ao.beta2 = aj.at("betas")[1], ao.eps = aj.at("eps");
    ao.weight_decay = aj.at("weight_decay");
    std::vector<float> losses;
    auto adamw = train(dir, steps, [&](auto p) { return std::make_unique<optim::AdamW>(p, ao); }, &losses);
    report.check("train_losses", "train_losses", Tensor::from_vector(losses, {int64_t(losses.size())}),
                 expected.at("train_losses"), 1e-4);

    const auto& sj = tj.at("sgd");
    optim::SGDOptions so{sj.at("lr"), sj.at("momentum"), sj.at("dampening"), sj.at("weight_decay"), sj.at("nesterov")};
    auto sgd = train(dir, steps, [&](auto p) { return std::make_unique<optim::SGD>(p, so); }, nullptr);

    const auto& lj = tj.at("lamb");
    optim::LambOptions lo;
    lo.lr = lj.at("lr"), lo.beta1 = lj.at("betas")[0], lo.beta2 = lj.at("betas")[1], lo.eps = lj.at("eps");
    lo.weight_decay = lj.at("weight_decay"), lo.bias_correction = lj.at("bias_correction");
    auto lamb = train(dir, steps, [&](auto p) { return std::make_unique<optim::Lamb>(p, lo); }, nullptr);

    for (auto& [kind, model, lr] : {std::tuple{"after_adamw", adamw, ao.lr}, std::tuple{"after_sgd", sgd, so.lr},
                                     std::tuple{"after_lamb", lamb, lo.lr}}) {
      for (auto& [pname, p] : model->named_parameters()) {
        const std::string key = std::string(kind) + "." + pname;
        const bool noisy = is_key_bias(pname) && std::string(kind) != "after_sgd";
        report.check(kind, key, p, expected.at(key), noisy ? 2 * lr * steps : 3e-5);
      }
    }
    if (!report.print(name + " (optimizers)")) ++failed;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " golden cases failed";
}
