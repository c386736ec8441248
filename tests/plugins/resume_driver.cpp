// Resumes across layouts: trains a tiny ViT on a fixed global batch of 8 (each rank its
// share), so any world size and plugin compute the same steps.
//   resume_driver full   DIR PLUGIN   6 steps; losses to DIR/full.txt, final model DIR/final_full
//   resume_driver save   DIR PLUGIN   3 steps, then model and optimizer to DIR/ckpt
//   resume_driver resume DIR PLUGIN   loads DIR/ckpt into a fresh model, steps 3..5; losses to
//                                     DIR/resume_<plugin>_np<N>.txt, final model DIR/final_<plugin>_np<N>
// PLUGIN: none, ddp, zero1, zero2, zero2_offload, tp2, tp2_zero1, tp2_zero2 (fp32; tp2: hybrid
// parallel with tp_size 2, ZeRO over its dp group).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "booster/booster.h"
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
  if (p.rfind("tp2", 0) == 0)
    return plugins::make_plugin(Config::from_string("[plugin]\nname = 'hybrid_parallel'\ntp_size = 2\nprecision = 'fp32'\n"
                                                    "zero_stage = " + std::string(p == "tp2" ? "0" : p.substr(8, 1)) + "\n"));
  const std::string stage = p.substr(4, 1), offload = p.find("offload") != std::string::npos ? "true" : "false";
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
    Tensor loss = b.model(xs, ys).loss;
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    char line[64];
    std::snprintf(line, sizeof line, "%d %.9g\n", s, dist::all_reduce_scalar(loss.item(), dist::ReduceOp::avg));
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
