// Resumes across layouts: trains a tiny ViT on a fixed global batch of 8 (each rank its
// share), so any world size and plugin compute the same steps.
//   resume_driver full   DIR PLUGIN   6 steps; losses to DIR/full.txt, final model DIR/final_full
//   resume_driver save   DIR PLUGIN   3 steps, then model and optimizer to DIR/ckpt
//   resume_driver resume DIR PLUGIN   loads DIR/ckpt into a fresh model, steps 3..5; losses to
//                                     DIR/resume_<plugin>_np<N>.txt, final model DIR/final_<plugin>_np<N>
// PLUGIN: none, ddp, zero1, zero2, zero2_offload, or hybrid parallel: tp2, tp2_zero1,
// tp2_zero2, pp2, pp2_zero2, tp2_pp2 (fp32; tp_size / pp_size 2 with 2 micro-batches
// through execute_pipeline, ZeRO over the dp group).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "booster/booster.h"
#include "core/kernels/ops.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "plugins/registry.h"
#include "tests/support/fixtures.h"

using namespace booster;

namespace {
std::shared_ptr<Plugin> plugin(const std::string& p) {
  if (p == "none") return nullptr;
  if (p == "ddp") return plugins::make_plugin(Config::from_string("[plugin]\nname = 'torch_ddp'\n"));
  const auto zero = p.find("zero");
  const std::string stage = zero == std::string::npos ? "0" : p.substr(zero + 4, 1);
  if (p.rfind("tp2", 0) == 0 || p.rfind("pp2", 0) == 0) {
    std::string t = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\nzero_stage = " + stage + "\n";
    if (p.find("tp2") != std::string::npos) t += "tp_size = 2\n";
    if (p.find("pp2") != std::string::npos) t += "pp_size = 2\nnum_microbatches = 2\n";
    return plugins::make_plugin(Config::from_string(t));
  }
  const std::string offload = p.find("offload") != std::string::npos ? "true" : "false";
  return plugins::make_plugin(Config::from_string("[plugin]\nname = 'low_level_zero'\nprecision = 'fp32'\nstage = " +
                                                  stage + "\ncpu_offload = " + offload + "\n"));
}
}  // namespace

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  BOOSTER_CHECK(argc == 4, "usage: resume_driver full|save|resume DIR PLUGIN");
  const std::string mode = argv[1], dir = argv[2], name = argv[3];
  const int n = dist::world_size(), r = dist::world_rank();
  BOOSTER_CHECK(8 % n == 0, "the world size must divide 8");
  manual_seed(mode == "resume" ? 7 : 42);  // a resumed model starts from other weights
  auto model = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
  optim::AdamOptions ao;
  ao.lr = 5e-3;
  auto pl = plugin(name);
  const int dp = pl ? pl->dp_size() : n, dr = pl ? pl->dp_rank() : r;  // replicas see different rows
  Booster booster(pl);
  auto b = booster.boost(model, std::make_shared<optim::AdamW>(model->named_parameters(), ao));
  int from = 0, to = mode == "save" ? 3 : 6;
  if (mode == "resume") {
    booster.load_model(*b.model, dir + "/ckpt/model");
    booster.load_optimizer(*b.optimizer, dir + "/ckpt/optimizer");
    from = 3;
  }
  std::string losses;
  for (int s = from; s < to; ++s) {
    Tensor x = Tensor::empty({8, 3, 8, 8});
    Generator(1000 + uint64_t(s)).normal_(x);
    std::vector<int64_t> y;
    for (int i = 0; i < 8; ++i) y.push_back((i + s) % 3);
    const int64_t per = 8 / dp;
    Tensor xs = x.narrow(0, dr * per, per).contiguous(), ys = Tensor::from_ints(y, {8}).narrow(0, dr * per, per).contiguous();
    b.optimizer->zero_grad();
    Tensor loss;  // a pipeline's is on its last stage
    if (pl && pl->support_pipeline()) {
      loss = booster
                 .execute_pipeline(single_batch({{"pixel_values", xs}, {"labels", ys}}), *b.model,
                                   on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); }),
                                   b.optimizer.get())
                 .loss;
    } else {
      loss = b.model(xs, ys).loss;
      booster.backward(loss, *b.optimizer);
    }
    b.optimizer->step();
    char line[64];
    std::snprintf(line, sizeof line, "%d %.9g\n", s,
                  dist::mean_where_held(loss.defined() ? std::optional<double>(loss.item()) : std::nullopt));
    losses += line;
  }
  const std::string tag = mode == "resume" ? name + "_np" + std::to_string(n) : "full";
  if (mode == "save") {
    booster.save_model(*b.model, dir + "/ckpt/model", true);
    booster.save_optimizer(*b.optimizer, dir + "/ckpt/optimizer", true);
    return 0;
  }
  booster.save_model(*b.model, dir + "/final_" + tag + ".ckpt");
  if (r == 0) std::ofstream(dir + "/" + (mode == "full" ? "full" : "resume_" + tag) + ".txt") << losses;
  return 0;
}
