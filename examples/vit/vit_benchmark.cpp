// vit_benchmark: for each plugin configuration and precision, a ViT training step's
// images/s, model GFLOP/s and its share of the oneDNN matmul ceiling measured in the same
// run, peak memory per rank (allocator and OS), and the PyTorch peer's same step with the
// ratio. A table on rank 0 and JSON lines. Run under mpirun like vit_train:
//   mpirun -np 2 vit_benchmark --configs configs/torch_ddp.toml --precisions fp32,bf16
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "booster/booster.h"
#include "ceiling.h"
#include "core/comm/collectives.h"
#include "core/comm/runtime.h"
#include "core/common/profiler.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"
#include "plugins/registry.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double step_s, images_per_s, gflops, ceiling_gflops, alloc_peak_mb, os_peak_mb;
};

Result measure(const std::string& config, const std::string& precision, const std::string& preset, int batch,
               int steps, bool profile) {
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  host_tier().reset_peak();
  auto model = std::make_shared<nn::ViTForImageClassification>(c);
  std::shared_ptr<Plugin> plugin = config == "none" ? nullptr : plugins::make_plugin(Config::from_file(config));
  Booster booster(plugin, precision);
  auto b = booster.boost(model, std::make_shared<optim::HybridAdam>(model->named_parameters()));
  Tensor x = Tensor::empty({batch, 3, c.image_size, c.image_size});
  Generator(uint64_t(dist::world_rank())).normal_(x);
  Tensor y = Tensor::zeros({batch}, DType::i64);
  auto step = [&] {
    b.optimizer->zero_grad();
    booster.backward((*b.model)(x, y).loss, *b.optimizer);
    b.optimizer->step();
  };
  step();  // warm-up
  dist::barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  dist::barrier();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  if (profile) {  // one more step, op by op (forward ops by name, backward as '<op> bwd')
    Profiler::reset();
    Profiler::enable();
    step();
    Profiler::enable(false);
    if (dist::world_rank() == 0)
      std::printf("per-op profile of one %s %s step, batch %d, %s:\n%s", preset.c_str(), precision.c_str(), batch,
                  config.c_str(), Profiler::report().c_str());
  }
  Result r{};
  r.step_s = elapsed / steps;
  r.images_per_s = double(batch) * dist::world_size() / r.step_s;
  r.gflops = 3 * bench::vit_fwd_flops(c.hidden_size, c.num_hidden_layers, c.image_size, c.patch_size) * r.images_per_s / 1e9;
  // The ceiling per rank, right after: the MLP matmul of this model and batch.
  const DType dt = precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
  bench::RawMatmul mm(int64_t(batch) * (c.num_patches() + 1), c.hidden_size, c.intermediate_size, dt);
  bench::RawMatmul mm32(int64_t(batch) * (c.num_patches() + 1), c.hidden_size, c.intermediate_size, DType::f32);
  r.ceiling_gflops = (mm.ok() ? mm : mm32).gflops() * dist::world_size();
  r.alloc_peak_mb = dist::all_reduce_scalar(double(host_tier().peak_bytes()) / (1 << 20), dist::ReduceOp::max);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  r.os_peak_mb = dist::all_reduce_scalar(double(ru.ru_maxrss) / 1024.0, dist::ReduceOp::max);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ViT training-step benchmark per plugin configuration and precision"};
  std::string configs = "none", precisions = "fp32", preset = "vit-tiny", json_path;
  std::string peer_script = std::string(BOOSTER_SHARED_DIR) + "/bench/torch_vit_bench.py";
  int batch = 16, steps = 3;
  bool no_peer = false, profile = false;
  app.add_option("--configs", configs, "comma-separated plugin configs (TOML with a [plugin] table) or none");
  app.add_option("--precisions", precisions, "comma-separated: fp32, bf16, fp16");
  app.add_option("--model", preset, "vit-tiny, vit-small or vit-base");
  app.add_option("--batch", batch, "batch per rank");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--json", json_path, "also append JSON lines here");
  app.add_option("--peer-script", peer_script, "torch_vit_bench.py");
  app.add_flag("--no-peer", no_peer, "skip the PyTorch peer");
  app.add_flag("--profile", profile, "print a per-op profile of one more step");
  CLI11_PARSE(app, argc, argv);
  dist::launch_from_openmpi();
  const bool master = dist::world_rank() == 0;
  const bool peer = master && !no_peer && bench::peer_available();
  const std::map<std::string, std::string> peer_model{{"vit-tiny", "tiny"}, {"vit-small", "small"}, {"vit-base", "base"}};
  std::ofstream json;
  if (master && !json_path.empty()) json.open(json_path, std::ios::app);
  if (master)
    std::printf("%-28s %-5s %5s | %8s %8s %6s | %9s %9s | %9s %6s\n", "config", "prec", "ranks", "img/s", "GFLOP/s",
                "ceil%", "alloc MB", "rss MB", "torch i/s", "ratio");
  for (auto& cfg : bench::split_list(configs)) {
    for (auto& prec : bench::split_list(precisions)) {
      const Result r = measure(cfg, prec, preset, batch, steps, profile);
      std::optional<bench::PeerResult> pr;
      // The peer runs one process with this rank's threads; compare per process.
      if (peer && peer_model.count(preset))
        pr = bench::run_peer(peer_script, peer_model.at(preset), batch, dist::omp_threads(), prec == "bf16", steps);
      const double per_rank = r.images_per_s / dist::world_size();
      if (master) {
        std::printf("%-28s %-5s %5d | %8.2f %8.1f %5.0f%% | %9.0f %9.0f | %9s %6s\n", cfg.c_str(), prec.c_str(),
                    dist::world_size(), r.images_per_s, r.gflops, 100 * r.gflops / r.ceiling_gflops, r.alloc_peak_mb,
                    r.os_peak_mb, pr ? std::to_string(pr->img_s).substr(0, 6).c_str() : "-",
                    pr ? std::to_string(per_rank / pr->img_s).substr(0, 4).c_str() : "-");
        nlohmann::json j{{"config", cfg}, {"precision", prec}, {"model", preset}, {"ranks", dist::world_size()},
                         {"batch_per_rank", batch}, {"images_per_s", r.images_per_s}, {"model_gflops", r.gflops},
                         {"ceiling_gflops", r.ceiling_gflops}, {"ceiling_share", r.gflops / r.ceiling_gflops},
                         {"alloc_peak_mb", r.alloc_peak_mb}, {"os_peak_mb", r.os_peak_mb}};
        if (pr) j["torch_images_per_s"] = pr->img_s, j["ratio_per_process"] = per_rank / pr->img_s;
        std::printf("%s\n", j.dump().c_str());
        if (json.is_open()) json << j.dump() << "\n";
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
