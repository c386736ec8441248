// gemini_cap_bench: a ViT whose model states exceed a memory cap, trained by GeminiPlugin
// with placement_policy auto under that cap, beside the same model without a cap (static
// placement, every chunk sharded, nothing offloaded) in the same run. Per row: the model
// states per rank (parameter slices, gradient shards, fp32 masters, Adam states), the cap,
// what placement kept resident and measured as non-model memory, the host tier's peak, the
// process's peak RSS (VmHWM) in each phase from boost through a checkpoint save and load
// (boost, the warm-up step, the other steps, save, load; the kernel's own peak, reset at each
// phase's start) beside the RSS the process had before any model (libraries, MPI: the stated
// margin), throughput, and the disk tier's bytes read and written per step. The losses of
// the two rows must agree (the same training). Largest rank shown. The model is built under
// nn::LazyInit (--eager: in fp32 first, as before), so the capped row's first phase, "build",
// is the kernel's peak RSS from process start through building the model: with the later
// phases, the peak from process start. --gradient-checkpointing runs the layers checkpointed.
// Exits 1 when a capped row's peak RSS in any phase exceeds cap + margin.
//   mpirun -np 2 gemini_cap_bench --model vit-huge --precision bf16 --batch 1 --steps 3 --gradient-checkpointing
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/lazy.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "plugins/gemini/gemini_plugin.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/registry.h"

using namespace booster;

namespace {

constexpr double kMB = double(1 << 20);

/// A field of /proc/self/status in bytes (VmHWM: the peak resident set).
double proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) * 1024.0;
  return 0;
}

/// Resets VmHWM to the current RSS (Linux: 5 to clear_refs).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double max_over_ranks(double v) { return dist::all_reduce_scalar(v, dist::ReduceOp::max); }

// The peak RSS of each phase: the kernel's VmHWM, reset when a phase begins (a phase begun
// from_process_start keeps the peak since the process began: nothing reset it before).
struct PhasePeaks {
  std::vector<std::pair<std::string, double>> mb;  // phase -> peak over the ranks
  std::string current;
  void begin(const std::string& phase, bool from_process_start = false) {
    end();
    current = phase;
    if (!from_process_start) reset_peak_rss();
  }
  void end() {
    if (current.empty()) return;
    mb.emplace_back(current, max_over_ranks(proc_status_bytes("VmHWM")) / kMB);
    current.clear();
  }
  double max() const {
    double m = 0;
    for (auto& [k, v] : mb) m = std::max(m, v);
    return m;
  }
};

struct Row {
  std::string name;
  double states_mb = 0, cap_mb = 0, resident_mb = 0, non_model_mb = 0, host_peak_mb = 0, build_rss_mb = 0, img_s = 0,
         read_mb = 0, written_mb = 0;
  PhasePeaks rss;  // boost, warm-up step, steps, save, load
  std::vector<double> losses;
};

/// A checkpoint of the run saved and loaded back (sharded, as vit_train saves), each a phase.
void save_and_load(Booster& booster, ModelWrapper& model, OptimizerWrapper& optimizer, bool capped, PhasePeaks& rss) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemini_cap_bench_" + std::to_string(::getppid()) + (capped ? "_capped" : ""))).string();
  rss.begin("save");
  booster.save_model(model, dir + "/model", true);
  booster.save_optimizer(optimizer, dir + "/optimizer", true);
  rss.begin("load");
  booster.load_model(model, dir + "/model");
  booster.load_optimizer(optimizer, dir + "/optimizer");
  rss.end();
  dist::barrier();
  if (dist::world_rank() == 0) std::filesystem::remove_all(dir);
}

/// The model from seed 7, under nn::LazyInit unless eager, its layers checkpointed when asked.
std::shared_ptr<nn::ViTForImageClassification> build_model(const nn::ViTConfig& c, bool lazy, bool ckpt) {
  manual_seed(7);
  std::shared_ptr<nn::ViTForImageClassification> model;
  if (lazy) {
    nn::LazyInit scope;
    model = std::make_shared<nn::ViTForImageClassification>(c);
  } else {
    model = std::make_shared<nn::ViTForImageClassification>(c);
  }
  if (ckpt) model->gradient_checkpointing_enable();
  return model;
}

/// One row; capped: placement auto under cap_mb (0: 0.45 x this rank's model states).
Row run(bool capped, double cap_mb, const std::string& base_toml, const std::string& precision, const nn::ViTConfig& c,
        int64_t batch, int warmup, int steps, bool lazy, bool ckpt) {
  Row r;
  // The first row's build phase keeps the peak since process start (no reset).
  r.rss.begin("build", /*from_process_start=*/capped);
  auto model = build_model(c, lazy, ckpt);
  std::string toml = base_toml;
  if (capped) {
    if (cap_mb <= 0) {  // below half the model states of a rank
      double elems = 0;
      for (auto& p : model->parameters()) elems += double((p.numel() + dist::world_size() - 1) / dist::world_size());
      cap_mb = 0.45 * elems * ((precision == "fp32" ? 4.0 : 2.0) + 4 + 4 + 8) / kMB;
    }
    char text[64];
    std::snprintf(text, sizeof text, "%.1f", cap_mb);
    toml += std::string("placement_policy = 'auto'\nmemory_cap_mb = ") + text + "\n";
    r.name = std::string("auto, cap ") + text + " MB";
  } else {
    r.name = "static, no cap";
  }
  r.build_rss_mb = max_over_ranks(proc_status_bytes("VmHWM")) / kMB;  // eager: the whole model was built in fp32 first
  Booster booster(plugins::make_plugin(Config::from_string(toml, "gemini_cap_bench")));
  r.rss.begin("boost");
  auto b = booster.boost(model, std::make_shared<optim::HybridAdam>(model->named_parameters()));
  model.reset();  // the user's handle: its parameters are the boosted ones
  auto* zm = b.model->find<plugins::LowLevelZeroModel>();
  const auto& zp = zm->engine()->layout();
  const auto& shards = zm->engine()->shards();
  double states = 0;
  for (auto& p : zp.parts()) states += double(p.n) * double(dtype_size(shards.working_dtype()) + 4 + 4 + 8);
  r.states_mb = max_over_ranks(states) / kMB;
  const auto* placement = static_cast<plugins::GeminiPlugin*>(booster.plugin())->placement();
  auto step = [&](int s) {
    Tensor x = Tensor::empty({batch, 3, c.image_size, c.image_size});
    Generator(uint64_t(1000 * s + dist::world_rank())).normal_(x);
    std::vector<int64_t> y;
    for (int64_t i = 0; i < batch; ++i) y.push_back((s + i) % c.num_labels);
    b.optimizer->zero_grad();
    Tensor loss = (*b.model)(x, Tensor::from_ints(y, {batch})).loss;
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    r.losses.push_back(dist::all_reduce_scalar(loss.item(), dist::ReduceOp::sum) / dist::world_size());
  };
  for (int s = 0; s < warmup; ++s) {
    if (s < 2) r.rss.begin(s == 0 ? "warm-up step" : "steps");
    step(s);
  }
  OffloadStore* store = shards.store();
  if (store) store->flush();
  const double read0 = store ? double(store->bytes_read()) : 0, written0 = store ? double(store->bytes_written()) : 0;
  host_tier().reset_peak();
  if (r.rss.current == "boost") r.rss.begin("steps");  // no warm-up steps were asked for
  dist::barrier();
  const auto t0 = std::chrono::steady_clock::now();
  double host_peak = 0;
  for (int s = warmup; s < warmup + steps; ++s) {
    step(s);
    host_peak = std::max(host_peak, placement ? double(placement->stats().last_peak) : double(host_tier().peak_bytes()));
  }
  if (store) store->flush();
  dist::barrier();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.img_s = double(batch * dist::world_size() * steps) / secs;
  save_and_load(booster, *b.model, *b.optimizer, capped, r.rss);
  r.host_peak_mb = max_over_ranks(host_peak) / kMB;
  if (store) {
    r.read_mb = max_over_ranks((double(store->bytes_read()) - read0) / steps) / kMB;
    r.written_mb = max_over_ranks((double(store->bytes_written()) - written0) / steps) / kMB;
  }
  if (placement) {
    const auto& st = placement->stats();
    r.cap_mb = double(st.cap) / kMB;
    r.resident_mb = max_over_ranks(double(st.resident_bytes)) / kMB;
    r.non_model_mb = double(st.non_model_peak) / kMB;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  CLI::App app{"Gemini auto placement under a memory cap, beside the same model uncapped"};
  std::string preset = "vit-large", precision = "bf16";
  int64_t batch = 2;
  int steps = 3, warmup = 2;
  double cap_mb = 0, chunk_m = 8;
  bool uncapped = true, eager = false, ckpt = false;
  app.add_option("--model", preset, "a ViT preset (vit-tiny ... vit-huge, vit-giant)");
  app.add_option("--precision", precision, "bf16, fp16 or fp32");
  app.add_option("--batch", batch, "images per rank");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "steps before timing (the first is placement's warm-up)");
  app.add_option("--cap-mb", cap_mb, "memory cap per rank (default: 0.45 x the model states per rank)");
  app.add_option("--chunk-m", chunk_m, "min_chunk_size_m (millions of elements)");
  app.add_flag("!--no-uncapped", uncapped, "skip the uncapped row");
  app.add_flag("--eager", eager, "build the model in fp32 before boost (default: under nn::LazyInit)");
  app.add_flag("--gradient-checkpointing", ckpt, "run the encoder's layers checkpointed");
  CLI11_PARSE(app, argc, argv);
  const double rss_start = max_over_ranks(double(resident_set_bytes())) / kMB;
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  const std::string base = "[plugin]\nname = 'gemini'\nprecision = '" + precision + "'\nmin_chunk_size_m = " +
                           std::to_string(chunk_m) + "\nsearch_range_m = " + std::to_string(chunk_m) + "\n";
  // The capped row first, while the process holds nothing else.
  std::vector<Row> rows{run(true, cap_mb, base, precision, c, batch, warmup, steps, !eager, ckpt)};
  if (uncapped) rows.push_back(run(false, 0, base, precision, c, batch, warmup, steps, !eager, ckpt));
  int bad = 0;
  if (dist::world_rank() == 0) {
    std::printf("%s %s, batch %lld per rank, %d ranks, built %s%s; RSS before any model %.1f MB (the margin)\n",
                preset.c_str(), precision.c_str(), (long long)batch, dist::world_size(),
                eager ? "eagerly (fp32)" : "lazily (nn::LazyInit)", ckpt ? ", layers checkpointed" : "", rss_start);
    std::printf("%-24s %9s %9s %9s %9s %9s %9s %8s %9s %9s %9s %8s\n", "row", "states", "cap", "resident", "non-model",
                "host pk", "RSS pk", "RSS/cap", "img/s", "read/st", "write/st", "vs last");
    for (auto& r : rows) {
      const double peak = r.rss.max(), within = r.cap_mb > 0 ? (peak - rss_start) / r.cap_mb : 0;
      if (r.cap_mb > 0 && peak > r.cap_mb + rss_start) ++bad;
      std::printf("%-24s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %9.3f %9.1f %9.1f %8.3f\n", r.name.c_str(), r.states_mb,
                  r.cap_mb, r.resident_mb, r.non_model_mb, r.host_peak_mb, peak, within, r.img_s, r.read_mb,
                  r.written_mb, r.img_s / rows.back().img_s);
      std::printf("  peak RSS by phase:");
      for (auto& [phase, mb] : r.rss.mb) std::printf(" %s %.1f", phase.c_str(), mb);
      std::printf(" MB\n");
    }
    std::printf("(MB per rank; RSS pk: the largest phase's, from process start (the first row's build phase is not "
                "reset) through a checkpoint save and load; RSS/cap = (peak RSS - RSS before any model) / cap; "
                "building the model peaked at %.1f MB RSS)\n",
                rows[0].build_rss_mb);
    if (rows[0].cap_mb > 0)
      std::printf("capped row: peak RSS from process start %.1f MB = %.3f x the cap %.1f MB; model states %.1f MB per "
                  "rank = %.2f x the cap\n",
                  rows[0].rss.max(), rows[0].rss.max() / rows[0].cap_mb, rows[0].cap_mb, rows[0].states_mb,
                  rows[0].states_mb / rows[0].cap_mb);
    double diff = 0;
    for (size_t s = 0; s < rows[0].losses.size() && rows.size() > 1; ++s)
      diff = std::max(diff, std::abs(rows.back().losses[s] - rows[0].losses[s]));
    std::printf("losses (capped row):");
    for (double l : rows[0].losses) std::printf(" %.4f", l);
    std::printf("\n");
    if (rows.size() > 1) std::printf("largest loss difference from the uncapped row: %.3g\n", diff);
    else std::printf("(no uncapped row ran: nothing to compare the losses with)\n");
  }
  dist::finalize();
  return bad ? 1 : 0;
}
