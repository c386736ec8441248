// GPT-2 parity with a PyTorch reference written from the architecture
// (tools/make_gpt2_golden.py, tests/nn/golden/gpt2_tiny): transformers' weight file loads by
// name (Conv1D weights [in, out], the head tied), and the logits, the shifted loss, every
// parameter's gradient and four AdamW steps match within ../shared/golden's tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/autograd/grad_mode.h"
#include "golden_util.h"
#include "nn/gpt2.h"
#include "nn/safetensors.h"
#include "optim/adam.h"

using namespace booster;
using namespace booster::nn;
using namespace booster::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = BOOSTER_GPT2_GOLDEN;

std::shared_ptr<GPT2LMHeadModel> golden_model() {
  auto m = std::make_shared<GPT2LMHeadModel>(GPT2Config::from_json_file((kDir / "config.json").string()));
  SafetensorsFile w = load_safetensors((kDir / "model.safetensors").string());
  NoGradGuard ng;
  const LoadResult r = m->load_state_dict(w.tensors, /*strict=*/true);
  EXPECT_TRUE(r.ok());
  return m;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, double(std::abs(v)));
  return m;
}

// The key third of c_attn's bias has an exactly zero gradient (a constant added to all of a
// query's scores leaves its softmax unchanged): the reference holds rounding noise there.
bool key_bias(const std::string& name, int64_t* key_begin, int64_t* key_len) {
  static const std::string suffix = "attn.c_attn.bias";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  *key_len = 32, *key_begin = 32;  // n_embd of the case: [q | k | v]
  return true;
}

}  // namespace

TEST(GPT2Golden, ForwardLossAndGradients) {
  auto m = golden_model();
  SafetensorsFile input = load_safetensors((kDir / "input.safetensors").string());
  SafetensorsFile expected = load_safetensors((kDir / "expected.safetensors").string());
  const Tensor ids = input.at("input_ids");
  auto out = (*m)(ids, ids);
  out.loss.backward();
  ErrorReport report;
  report.check("logits", "logits", out.logits, expected.at("logits"), 1e-4);
  report.check("loss", "loss", out.loss.reshape({1}), expected.at("loss"), 1e-4);
  int64_t grads = 0;
  for (auto& [name, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const Tensor want = expected.at("grad." + name);
    report.check("grad", "grad." + name, p.grad(), want, 1e-5 + 1e-3 * max_abs(want));
    ++grads;
  }
  EXPECT_EQ(grads, 2 + 2 * 12 + 2);  // wte, wpe, 12 a block, ln_f: every gradient compared
  EXPECT_TRUE(report.print("gpt2_tiny")) << "GPT-2 differs from the PyTorch reference";
}

TEST(GPT2Golden, AdamWSteps) {
  SafetensorsFile expected = load_safetensors((kDir / "expected.safetensors").string());
  const auto adamw = nlohmann::json::parse(expected.metadata.at("adamw"));
  const int steps = std::stoi(expected.metadata.at("steps"));
  optim::AdamOptions o;
  o.lr = adamw.at("lr"), o.beta1 = adamw.at("betas")[0], o.beta2 = adamw.at("betas")[1], o.eps = adamw.at("eps");
  o.weight_decay = adamw.at("weight_decay");
  auto m = golden_model();
  const Tensor ids = load_safetensors((kDir / "input.safetensors").string()).at("input_ids");
  optim::AdamW opt(m->named_parameters(), o);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = (*m)(ids, ids).loss;
    losses.push_back(float(loss.item()));
    loss.backward();
    opt.step();
  }
  ErrorReport report;
  report.check("train_losses", "train_losses", Tensor::from_vector(losses, {int64_t(losses.size())}),
               expected.at("train_losses"), 1e-4);
  for (auto& [name, p] : m->named_parameters()) {
    const Tensor want = expected.at("after_adamw." + name);
    int64_t kb = 0, kl = 0;
    if (!key_bias(name, &kb, &kl)) {
      report.check("after_adamw", "after_adamw." + name, p, want, 6e-5);
      continue;
    }
    // q and v parts as any parameter; the key part moves by ~lr a step whatever its noise.
    report.check("after_adamw", name + " (q)", p.narrow(0, 0, kb), want.narrow(0, 0, kb), 6e-5);
    report.check("after_adamw", name + " (v)", p.narrow(0, kb + kl, kb), want.narrow(0, kb + kl, kb), 6e-5);
    report.check("after_adamw", name + " (k)", p.narrow(0, kb, kl), want.narrow(0, kb, kl), 2 * o.lr * steps);
  }
  EXPECT_TRUE(report.print("gpt2_tiny AdamW")) << "GPT-2 after AdamW differs from the PyTorch reference";
}
