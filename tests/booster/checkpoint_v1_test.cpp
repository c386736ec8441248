// Checkpoints of format 1, written by the release before format 2 (tests/booster/data/
// checkpoint_v1, see its README), load: the model gives the logits that release computed,
// and the optimizer state continues to the same next step. fp32 and bf16, one file and
// sharded.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "booster/booster.h"
#include "booster/checkpoint/tensor_store.h"
#include "core/autograd/grad_mode.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "tests/support/fixtures.h"

using namespace booster;

namespace {

const std::string kDir = BOOSTER_V1_FIXTURE;

nn::ViTConfig small() { return testkit::tiny_vit(); }

std::pair<Tensor, Tensor> batch(int s) {
  Tensor x = Tensor::empty({4, 3, 8, 8});
  Generator(500 + uint64_t(s)).normal_(x);
  return {x, Tensor::from_ints({0, 1, 2, int64_t(s % 3)}, {4})};
}

std::map<std::string, std::vector<float>> expected() {
  std::map<std::string, std::vector<float>> out;
  std::ifstream in(kDir + "/expected.txt");
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string tag, v;
    ls >> tag;
    while (ls >> v) out[tag].push_back(std::strtof(v.c_str(), nullptr));
  }
  return out;
}

// Logits within tol of the release's (fp32 kernels may sum in another order on another CPU).
void expect_close(const Tensor& got, const std::vector<float>& want, double tol, const std::string& what) {
  const auto g = got.to(DType::f32).to_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << what << " [" << i << "]";
}

void check(const std::string& precision, const std::string& model_ckpt, const std::string& optim_ckpt, double tol) {
  const auto want = expected();
  manual_seed(99);  // other initial weights: everything must come from the checkpoint
  auto model = std::make_shared<nn::ViTForImageClassification>(small());
  optim::AdamOptions ao;
  ao.lr = 1e-2, ao.weight_decay = 0.01;
  Booster booster(nullptr, precision == "fp32" ? "" : precision);
  auto b = booster.boost(model, std::make_shared<optim::AdamW>(model->named_parameters(), ao));
  booster.load_model(*b.model, kDir + "/" + model_ckpt);
  booster.load_optimizer(*b.optimizer, kDir + "/" + optim_ckpt);
  auto [x, y] = batch(9);
  {
    NoGradGuard ng;
    expect_close(b.model(x).logits, want.at(precision + "_logits"), tol, model_ckpt + " logits");
  }
  auto [x2, y2] = batch(2);
  b.optimizer->zero_grad();
  booster.backward(b.model(x2, y2).loss, *b.optimizer);
  b.optimizer->step();
  NoGradGuard ng;
  expect_close(b.model(x).logits, want.at(precision + "_logits_after_step"), tol, optim_ckpt + " next step");
}

}  // namespace

TEST(CheckpointV1, Fp32OneFileAndShardedLoadAndContinue) {
  check("fp32", "fp32_model.ckpt", "fp32_optimizer.ckpt", 1e-5);
  check("fp32", "fp32_model", "fp32_optimizer", 1e-5);
  // The sharded model was written with 4 KB shards: tensors split over several files.
  auto l = ckpt::load_tensors(kDir + "/fp32_model", "model");
  EXPECT_EQ(l.index.format_version(), 1u);
  EXPECT_GE(l.index.shard_files_size(), 3);
}

TEST(CheckpointV1, Bf16MastersLoadAndContinue) {
  // bf16 compute differs between CPUs (AMX, AVX512-BF16, f32 fallback): a bf16 tolerance.
  check("bf16", "bf16_model.ckpt", "bf16_optimizer.ckpt", 2e-2);
}
