// ViT training-step benchmark (forward, backward, AdamW) against the PyTorch peer, run
// alternately in one invocation: images/s, model GFLOP/s (the peer's FLOP formula) and the ratio.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

bool g_profile = false;

// Seconds per training step (forward, backward, AdamW step: the peer's step) of ViT
// `preset` at `batch`, median of `steps`.
double our_step_seconds(const std::string& preset, int batch, int steps) {
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  nn::ViTForImageClassification model(c);
  optim::AdamW opt(model.named_parameters(), [] {
    optim::AdamOptions o;  // torch.optim.AdamW(lr=1e-4), as the peer
    o.lr = 1e-4;
    o.weight_decay = 0.01;
    return o;
  }());
  Tensor x = Tensor::empty({batch, 3, 224, 224});
  Generator(1).normal_(x);
  Tensor y = Tensor::from_ints(std::vector<int64_t>(size_t(batch), 1), {batch});
  auto step = [&] {
    opt.zero_grad();
    model(x, y).loss.backward();
    opt.step();
  };
  step();  // warm-up: primitive creation
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    step();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (g_profile)
    std::printf("per-op profile of one %s step, batch %d (forward ops by name, backward as '<op> bwd'):\n%s", preset.c_str(),
                batch, bench::profile_step(step).c_str());
  return bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ViT forward+backward benchmark against the PyTorch peer"};
  std::string models = "tiny,small,base", batches = "8,16";
  std::string peer_script = std::string(BOOSTER_SHARED_DIR) + "/bench/torch_vit_bench.py";
  int steps = 3, threads = 2;
  bool no_peer = false;
  app.add_option("--models", models, "comma-separated: tiny, small, base");
  app.add_option("--batches", batches, "comma-separated batch sizes");
  app.add_option("--steps", steps, "timed steps per measurement");
  app.add_option("--threads", threads, "threads for the peer (ours follow OMP_NUM_THREADS)");
  app.add_option("--peer-script", peer_script, "path of torch_vit_bench.py");
  app.add_flag("--no-peer", no_peer, "skip the PyTorch peer");
  app.add_flag("--profile", g_profile, "print a per-op profile of one step");
  CLI11_PARSE(app, argc, argv);

  const bool peer = !no_peer && bench::peer_available();
  if (!no_peer && !peer) std::printf("PyTorch peer unavailable (apt-get install python3-torch libopenblas0-openmp)\n");
  std::printf("%-6s %5s | %10s %10s | %10s %10s | %6s\n", "model", "batch", "ours img/s", "GFLOP/s", "torch img/s",
              "GFLOP/s", "ratio");
  const std::map<std::string, std::pair<int64_t, int64_t>> dims{{"tiny", {192, 12}}, {"small", {384, 12}}, {"base", {768, 12}}};
  for (auto& m : bench::split_list(models)) {
    for (auto& bs : bench::split_list(batches)) {
      const int b = std::stoi(bs);
      const double s = our_step_seconds("vit-" + m, b, steps);
      const double ips = b / s, gf = 3 * bench::vit_fwd_flops(dims.at(m).first, dims.at(m).second) * ips / 1e9;
      std::optional<bench::PeerResult> pr;
      if (peer) pr = bench::run_peer(peer_script, m, b, threads, false, steps);
      if (pr)
        std::printf("%-6s %5d | %10.2f %10.1f | %10.2f %10.1f | %6.2f\n", m.c_str(), b, ips, gf, pr->img_s, pr->gflops,
                    ips / pr->img_s);
      else
        std::printf("%-6s %5d | %10.2f %10.1f | %10s %10s | %6s\n", m.c_str(), b, ips, gf, "-", "-", "-");
      std::fflush(stdout);
    }
  }
}
