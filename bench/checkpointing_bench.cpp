// checkpointing_bench: a ViT training step with the encoder's layers checkpointed
// (gradient_checkpointing_enable) beside the same step without, alternated in one run. Per
// row: step time (median), the activation memory the forward keeps for backward (the host
// tier's bytes in use after the forward, less before), the step's peak, and the ratios
// against the plain row; the checkpointed row's kept bytes beside the theory (one [B, T, H]
// input per layer instead of every activation) and its time beside one more forward
// (about 4/3 of a step whose backward costs two forwards).
//   OMP_NUM_THREADS=2 build/bench/checkpointing_bench --model vit-base --batch 8 --precision bf16
#include <CLI/CLI.hpp>
#include <omp.h>
#include <chrono>
#include <cstdio>

#include "booster/booster.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kMB = double(1 << 20);

struct Measure {
  double seconds = 0, kept_mb = 0, peak_mb = 0;
};

// One step of `model` (boosted for the precision) timed, with the bytes its forward keeps.
Measure step(Booster& booster, BoostResult<nn::ViTForImageClassification>& b, const Tensor& x, const Tensor& y) {
  Measure m;
  b.optimizer->zero_grad();
  host_tier().reset_peak();
  const size_t before = host_tier().bytes_in_use();
  const auto t0 = Clock::now();
  Tensor loss = (*b.model)(x, y).loss;
  m.kept_mb = double(host_tier().bytes_in_use() - before) / kMB;
  booster.backward(loss, *b.optimizer);
  b.optimizer->step();
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.peak_mb = double(host_tier().peak_bytes() - before) / kMB;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a checkpointed ViT step beside a plain one"};
  std::string preset = "vit-base", precision = "bf16";
  int batch = 8, steps = 3, rounds = 3;
  app.add_option("--model", preset, "a ViT preset");
  app.add_option("--batch", batch, "images a step");
  app.add_option("--precision", precision, "fp32 or bf16 (Booster mixed precision)");
  app.add_option("--steps", steps, "timed steps a round");
  app.add_option("--rounds", rounds, "rounds of plain then checkpointed; medians reported");
  CLI11_PARSE(app, argc, argv);
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  Tensor x = Tensor::empty({batch, 3, c.image_size, c.image_size});
  Generator(1).normal_(x);
  Tensor y = Tensor::from_ints(std::vector<int64_t>(size_t(batch), 1), {batch});
  struct Row {
    const char* name;
    std::shared_ptr<Booster> booster;
    BoostResult<nn::ViTForImageClassification> b;
    std::vector<double> t, kept, peak;
  };
  std::vector<Row> rows;
  for (bool ckpt : {false, true}) {
    manual_seed(7);
    auto model = std::make_shared<nn::ViTForImageClassification>(c);
    if (ckpt) model->gradient_checkpointing_enable();
    auto booster = std::make_shared<Booster>(nullptr, precision);
    auto opt = std::make_shared<optim::AdamW>(model->named_parameters(), optim::AdamOptions{1e-4});
    auto b = booster->boost(model, opt);
    rows.push_back({ckpt ? "checkpointed" : "plain", booster, std::move(b), {}, {}, {}});
    step(*rows.back().booster, rows.back().b, x, y);  // warm-up: primitives, optimizer states
  }
  for (int r = 0; r < rounds; ++r)
    for (auto& row : rows)
      for (int s = 0; s < steps; ++s) {
        const Measure m = step(*row.booster, row.b, x, y);
        row.t.push_back(m.seconds), row.kept.push_back(m.kept_mb), row.peak.push_back(m.peak_mb);
      }
  const int64_t T = (c.image_size / c.patch_size) * (c.image_size / c.patch_size) + 1, L = c.num_hidden_layers;
  const double input_mb = double(batch * T * c.hidden_size) * (precision == "fp32" ? 4.0 : 2.0) / kMB;
  std::printf("%s %s, batch %d, %d threads; one layer's input [%d, %lld, %lld] = %.2f MB\n", preset.c_str(),
              precision.c_str(), batch, omp_get_max_threads(), batch, (long long)T, (long long)c.hidden_size, input_mb);
  std::printf("%-13s %9s %8s %13s %9s %13s %9s\n", "row", "step s", "img/s", "kept by fwd MB", "x plain", "step peak MB",
              "x plain");
  const double t0 = bench::median(rows[0].t), k0 = bench::median(rows[0].kept), p0 = bench::median(rows[0].peak);
  for (auto& row : rows) {
    const double t = bench::median(row.t), k = bench::median(row.kept), p = bench::median(row.peak);
    std::printf("%-13s %9.3f %8.2f %13.1f %9.3f %13.1f %9.3f\n", row.name, t, batch / t, k, k / k0, p, p / p0);
  }
  const double k1 = bench::median(rows[1].kept);
  std::printf("checkpointed: kept %.1f MB against the theory of %lld layer inputs %.1f MB (%.2fx; the rest: embeddings, "
              "final norm, head); plain keeps %.1f MB per layer; time %.3fx plain (one more forward: about 1.33x)\n",
              k1, (long long)L, double(L) * input_mb, k1 / (double(L) * input_mb), k0 / double(L),
              bench::median(rows[1].t) / t0);
}
