// TorchDDPPlugin scaling: run under `mpirun -np 1` and `-np 2` with OMP_NUM_THREADS=1.
// Prints images/s of a ViT training step (forward, backward, SGD step) at a per-rank batch
// and the time spent waiting on all-reduce after backward. Scaling efficiency is
// img/s(2 ranks) / (2 x img/s(1 rank)); scripts/ddp_scaling.sh runs both and divides.
#include <chrono>
#include <cstdio>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/torch_ddp/torch_ddp_plugin.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  const std::string preset = argc > 1 ? argv[1] : "vit-tiny";
  const int batch = argc > 2 ? std::atoi(argv[2]) : 16, steps = argc > 3 ? std::atoi(argv[3]) : 4;
  const std::string precision = argc > 4 ? argv[4] : "fp32";
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  auto model = std::make_shared<nn::ViTForImageClassification>(c);
  auto plugin = std::make_shared<plugins::TorchDDPPlugin>();
  Booster booster(plugin, precision);
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.01, 0.9}));
  Tensor x = Tensor::empty({batch, 3, 224, 224});
  Generator(dist::world_rank()).normal_(x);
  Tensor y = Tensor::zeros({batch}, DType::i64);
  auto step = [&] {
    b.optimizer->zero_grad();
    booster.backward(b.model(x, y).loss, *b.optimizer);
    b.optimizer->step();
  };
  step();
  dist::barrier();
  plugins::Reducer& reducer = b.model->find<plugins::TorchDDPModel>()->reducer();
  reducer.reset_wait_seconds();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  dist::barrier();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double ips = double(batch) * dist::world_size() * steps / s;
  const double wait = dist::all_reduce_scalar(reducer.wait_seconds(), dist::ReduceOp::max) / steps;
  if (dist::world_rank() == 0)
    std::printf("ddp %s %s ranks=%d threads=%d batch/rank=%d img/s=%.3f step_s=%.3f allreduce_wait_s=%.4f buckets=%zu\n",
                preset.c_str(), precision.c_str(), dist::world_size(), dist::omp_threads(), batch, ips, s / steps, wait,
                reducer.num_buckets());
}
