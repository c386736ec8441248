// vit_benchmark: for each plugin configuration and precision, a ViT training step's
// images/s, model GFLOP/s and its share of the oneDNN matmul ceiling measured in the same
// run, memory per rank (this rank's parameters, the activations a forward holds for its
// backward, or under a pipeline the most its micro-batches in flight held, the allocator's
// and the OS's peak), and the PyTorch peer's same step with the ratio. A pipeline layout
// (pp_size > 1) steps through execute_pipeline. A table on rank 0 and JSON lines. Run under mpirun like vit_train:
//   mpirun -np 2 vit_benchmark --configs configs/torch_ddp.toml --precisions fp32,bf16
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "booster/booster.h"
#include "ceiling.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "handoff.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"
#include "plugins/galvatron/galvatron_plugin.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "plugins/registry.h"
#include "run_setup.h"
#include "tp_formulas.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

// One boosted ViT training step (zero_grad, forward, booster.backward, step) of a plugin
// configuration and precision, timed round by round so the peer can run in between.
class StepBench {
 public:
  StepBench(const std::string& config, const std::string& precision, const std::string& preset, int batch,
            bool split_batch, int heads = 0)
      : precision_(precision), batch_(batch), c_(nn::ViTConfig::preset(preset)) {
    c_.num_labels = 3;
    if (heads > 0) c_.num_attention_heads = heads;  // the same shapes and FLOPs, heads that divide by more ranks
    host_tier().reset_peak();
    model_ = std::make_shared<nn::ViTForImageClassification>(c_);
    std::string mixed;
    std::shared_ptr<Plugin> plugin = examples::make_bench_plugin(config, precision, mixed);
    booster_.emplace(plugin, mixed, split_batch);
    pipelined_ = plugin && plugin->support_pipeline();
    hybrid_ = std::dynamic_pointer_cast<plugins::HybridParallelPlugin>(plugin);
    galvatron_ = std::dynamic_pointer_cast<plugins::GalvatronPlugin>(plugin);
    dp_ = plugin ? plugin->dp_size() : dist::world_size();  // replicas that see different images
    boosted_ = booster_->boost(model_, std::make_shared<optim::HybridAdam>(model_->named_parameters()));
    for (auto& [name, p] : model_->named_parameters()) param_bytes_ += p.nbytes();
    x_ = Tensor::empty({batch, 3, c_.image_size, c_.image_size});
    Generator(uint64_t(plugin ? plugin->dp_rank() : dist::world_rank())).normal_(x_);  // a tp replica's ranks: the same images
    y_ = Tensor::zeros({batch}, DType::i64);
    warm_up();  // primitive creation, first allocations
  }

  /// One untimed step: after construction, and before a round that follows the peer's (its
  /// process evicted this one's caches; the peer warms up with a step of its own too).
  void warm_up() {
    step();
    dist::barrier();
  }

  /// Seconds per step over `steps` steps, all ranks together.
  double seconds(int steps) {
    dist::barrier();
    GradSync* sync = boosted_.model->grad_sync();
    if (sync) sync->reset_wait_seconds();
    host_tier().reset_peak();
    dist::reset_traffic();
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    dist::barrier();
    comm_bytes_ = double(dist::traffic_bytes()) / steps;
    step_peak_ = std::max(step_peak_, host_tier().peak_bytes());
    sync_wait_s_ = dist::all_reduce_scalar((sync ? sync->wait_seconds() : 0.0) / steps, dist::ReduceOp::max);
    return std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  }
  /// Seconds a step of the last seconds() waited for gradient communication after
  /// backward (the slowest rank).
  double sync_wait_seconds() const { return sync_wait_s_; }

  /// More steps, op by op (each op's median over them), with the linears and attention rated
  /// against the ceiling (this rank's: the sum over ranks shared evenly, as is the work).
  std::string profile(double ceiling_sum, int steps) {
    const bench::VitFlops f =
        bench::vit_fwd_flop_parts(c_.hidden_size, c_.num_hidden_layers, c_.image_size, c_.patch_size);
    const double images = double(batch_) * dp_ / dist::world_size(), step_gflop = 3 * images / 1e9;
    return bench::profile_step([this] { step(); },
                               {{"linears", {"linear", "linear bwd"}, f.linears * step_gflop},
                                {"attention products", {"attention", "attention bwd"}, f.attention * step_gflop}},
                               ceiling_sum / dist::world_size(), steps);
  }

  /// The allocator's peak over the timed steps (boost's own transients left out).
  size_t step_peak_bytes() const { return step_peak_; }
  /// Bytes of this rank's parameters (its shards under tensor parallelism).
  size_t param_bytes() const { return param_bytes_; }
  /// Bytes this rank put on the wire per step of the last seconds() (dist::traffic_bytes).
  double comm_bytes() const { return comm_bytes_; }
  /// Tensor parallelism without a pipeline or data parallelism: its formula (tp_formulas.h).
  std::optional<examples::TpFormula> tp_formula() const {
    if (!hybrid_ || hybrid_->tp_size() == 1 || pipelined_ || dp_ != 1 || precision_ != "fp32") return std::nullopt;
    const auto& o = hybrid_->options();
    return examples::tp_formula(c_, batch_, o.tp_mode, o.tp_size, o.tp_depth);
  }
  /// Bytes the last forward held until its backward (saved activations, the loss).
  size_t activation_bytes() const { return activation_bytes_; }

  double images_per_s(double step_s) const { return double(batch_) * dp_ / step_s; }
  double gflops(double step_s) const {
    return 3 * bench::vit_fwd_flops(c_.hidden_size, c_.num_hidden_layers, c_.image_size, c_.patch_size) *
           images_per_s(step_s) / 1e9;
  }
  /// The ceiling, summed over ranks: the raw MLP matmul of this model and batch (measured
  /// now: each round measures it beside the steps, the machines being noisy).
  /// Built for each measurement and dropped after it: its operands ([rows, hidden] and
  /// [rows, intermediate], 1.4 MiB an image at ViT-S) would otherwise sit under the steps'
  /// allocator peak, which is the training's alone.
  double ceiling_gflops() {
    const DType dt = dtype_from_name(precision_);
    const int64_t m = int64_t(batch_) * (c_.num_patches() + 1);
    std::optional<bench::RawMatmul> ceiling(std::in_place, m, c_.hidden_size, c_.intermediate_size, dt);
    if (!ceiling->ok()) ceiling.emplace(m, c_.hidden_size, c_.intermediate_size, DType::f32);
    return dist::all_reduce_scalar(ceiling->gflops(), dist::ReduceOp::sum);
  }

 private:
  void step() {
    boosted_.optimizer->zero_grad();
    if (pipelined_) {
      static const StageCriterion ce = on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); });
      booster_->execute_pipeline(single_batch({{"pixel_values", x_}, {"labels", y_}}), *boosted_.model, ce,
                                 boosted_.optimizer.get());
      activation_bytes_ = (hybrid_ ? hybrid_->pipeline_stats() : galvatron_->pipeline_stats())->peak_activation_bytes;
    } else {
      const size_t before = host_tier().bytes_in_use();
      Tensor loss = boosted_.model(x_, y_).loss;
      activation_bytes_ = host_tier().bytes_in_use() - before;
      booster_->backward(loss, *boosted_.optimizer);
    }
    boosted_.optimizer->step();
  }

  std::string precision_;
  int batch_, dp_ = 1;
  nn::ViTConfig c_;
  std::shared_ptr<nn::ViTForImageClassification> model_;
  std::optional<Booster> booster_;
  BoostResult<nn::ViTForImageClassification> boosted_;
  Tensor x_, y_;
  double sync_wait_s_ = 0, comm_bytes_ = 0;
  size_t param_bytes_ = 0, activation_bytes_ = 0, step_peak_ = 0;
  bool pipelined_ = false;
  std::shared_ptr<plugins::HybridParallelPlugin> hybrid_;
  std::shared_ptr<plugins::GalvatronPlugin> galvatron_;
};

/// The largest of the ranks' byte counts, in MB.
double max_mb(size_t bytes) { return dist::all_reduce_scalar(double(bytes) / (1 << 20), dist::ReduceOp::max); }

double peak_alloc_mb() { return max_mb(host_tier().peak_bytes()); }

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return dist::all_reduce_scalar(double(ru.ru_maxrss) / 1024.0, dist::ReduceOp::max);
}

/// Each round's figures (ours and the peer's alternated round by round; the machines are
/// shared and noisy, so the report takes medians).
struct Rounds {
  std::vector<double> ours, theirs, ratios, waits, ceilings, shares, handoffs;
};

Rounds run_rounds(StepBench& sb, int rounds, int steps, const std::function<std::optional<bench::PeerResult>()>& peer_round) {
  Rounds r;
  for (int round = 0; round < rounds; ++round) {
    // After a peer's round (only the master runs it): an untimed step first (warm_up).
    if (dist::all_reduce_scalar(r.theirs.empty() ? 0.0 : 1.0, dist::ReduceOp::max) > 0) sb.warm_up();
    // Where the process's threads sit, beside each round (handoff.h): one process's threads
    // on two L3 domains run the step 6-8 % slower than on one. Ranks of one thread each
    // have no pair of their own to measure; a round whose probe got no answer lists none.
    if (dist::omp_threads() >= 2)
      if (const double ns = bench::omp_thread_handoff_ns(); !std::isnan(ns)) r.handoffs.push_back(ns);
    // The ceiling before and after the round's steps, the better of the two: a slow spell
    // in one burst used to read as a share over 100 %.
    const double ceiling_before = sb.ceiling_gflops();
    r.ours.push_back(sb.seconds(steps));
    r.waits.push_back(sb.sync_wait_seconds());
    r.ceilings.push_back(std::max(ceiling_before, sb.ceiling_gflops()));
    r.shares.push_back(sb.gflops(r.ours.back()) / r.ceilings.back());
    if (std::optional<bench::PeerResult> pr = peer_round()) {
      r.theirs.push_back(pr->img_s);
      r.ratios.push_back(sb.images_per_s(r.ours.back()) / dist::world_size() / pr->img_s);
    }
  }
  return r;
}

void print_header() {
  std::printf("%-28s %-5s %5s | %8s %8s %6s %8s | %8s %8s %9s %9s | %9s %6s | %10s\n", "config", "prec", "ranks", "img/s",
              "GFLOP/s", "ceil%", "sync ms", "param MB", "act MB", "alloc MB", "rss MB", "torch i/s", "ratio", "handoff ns");
}

// Tensor parallelism's measured parameter and communication bytes beside its formulas.
void report_formula(const examples::TpFormula& f, const std::string& label, double param_mb, double comm_mb,
                    nlohmann::json& j) {
  const double fp = f.param_bytes / (1 << 20), fc = f.comm_bytes / (1 << 20);
  j["param_formula_mb"] = fp, j["comm_formula_mb_per_step"] = fc;
  std::printf("  %s: param MB %.2f (formula %.2f, %+.1f%%), comm MB a step %.2f (formula %.2f, %+.1f%%)\n",
              label.c_str(), param_mb, fp, 100 * (param_mb / fp - 1), comm_mb, fc, 100 * (comm_mb / fc - 1));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ViT training-step benchmark per plugin configuration and precision"};
  std::string configs = "none", precisions = "fp32", preset = "vit-tiny", json_path;
  std::string peer_script = std::string(BOOSTER_SHARED_DIR) + "/bench/torch_vit_bench.py";
  int batch = 16, steps = 3, rounds = 1, heads = 0;
  bool no_peer = false, profile = false, split_batch = false;
  int profile_steps = 5;
  app.add_option("--configs", configs, "comma-separated plugin configs (TOML with a [plugin] table) or none");
  app.add_option("--precisions", precisions, "comma-separated: fp32, bf16, fp16");
  app.add_option("--model", preset, "vit-tiny, vit-small or vit-base");
  app.add_option("--batch", batch, "batch per rank");
  app.add_option("--heads", heads, "attention heads (0: the preset's; ViT-B's 12 do not divide over 8 ranks of 1D)");
  app.add_option("--steps", steps, "timed steps per round");
  app.add_option("--rounds", rounds, "rounds of ours then the peer, alternated; medians reported")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also append JSON lines here");
  app.add_option("--peer-script", peer_script, "torch_vit_bench.py");
  app.add_flag("--no-peer", no_peer, "skip the PyTorch peer");
  app.add_flag("--split-batch", split_batch,
               "Booster split_batch: each thread runs its own share of the batch (the config's name gets +split)");
  app.add_flag("--profile", profile, "print a per-op profile of more steps (--profile-steps), each op's median");
  app.add_option("--profile-steps", profile_steps, "steps the profile takes medians over")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  dist::launch();
  const bool master = dist::world_rank() == 0;
  const bool peer = master && !no_peer && bench::peer_available();
  const std::map<std::string, std::string> peer_model{{"vit-tiny", "tiny"}, {"vit-small", "small"}, {"vit-base", "base"}};
  std::ofstream json;
  if (master && !json_path.empty()) json.open(json_path, std::ios::app);
  if (master) print_header();
  for (auto& cfg : bench::split_list(configs)) {
    for (auto& prec : bench::split_list(precisions)) {
      StepBench sb(cfg, prec, preset, batch, split_batch, heads);
      const std::string label = split_batch ? cfg + "+split" : cfg;
      const Rounds r = run_rounds(sb, rounds, steps, [&]() -> std::optional<bench::PeerResult> {
        // The peer runs one process with this rank's threads; compare per process.
        if (!peer || !peer_model.count(preset)) return std::nullopt;
        return bench::run_peer(peer_script, peer_model.at(preset), batch, dist::omp_threads(), prec == "bf16", steps);
      });
      const auto& [ours, theirs, ratios, waits, ceilings, shares, handoffs] = r;
      // The share of the ceiling: the median of the rounds' (each beside its own ceiling).
      const double step_s = bench::median(ours), ceiling = bench::median(ceilings), share = bench::median(shares);
      const double alloc_mb = peak_alloc_mb(), rss_mb = peak_rss_mb();
      const double param_mb = max_mb(sb.param_bytes()), act_mb = max_mb(sb.activation_bytes());
      const double step_peak_mb = max_mb(sb.step_peak_bytes());
      const double comm_mb = dist::all_reduce_scalar(sb.comm_bytes() / (1 << 20), dist::ReduceOp::max);
      const auto formula = sb.tp_formula();
      const std::string report = profile ? sb.profile(ceiling, profile_steps) : "";
      if (!master) continue;
      if (profile)
        std::printf("per-op profile of a %s %s step, batch %d, %s:\n%s", preset.c_str(), prec.c_str(), batch,
                    label.c_str(), report.c_str());
      const bool have_peer = !ratios.empty();
      const double wait_ms = 1e3 * bench::median(waits);
      const bool have_handoff = !handoffs.empty();
      std::printf("%-28s %-5s %5d | %8.2f %8.1f %5.0f%% %8.1f | %8.1f %8.1f %9.0f %9.0f | %9s %6s | %10s\n", label.c_str(),
                  prec.c_str(), dist::world_size(), sb.images_per_s(step_s), sb.gflops(step_s),
                  100 * share, wait_ms, param_mb, act_mb, alloc_mb, rss_mb, have_peer ? std::to_string(bench::median(theirs)).substr(0, 6).c_str() : "-",
                  have_peer ? std::to_string(bench::median(ratios)).substr(0, 4).c_str() : "-",
                  have_handoff ? std::to_string(int64_t(std::lround(bench::median(handoffs)))).c_str() : "-");
      nlohmann::json j{{"config", cfg}, {"precision", prec}, {"model", preset}, {"ranks", dist::world_size()},
                       {"batch_per_rank", batch}, {"split_batch", split_batch}, {"images_per_s", sb.images_per_s(step_s)},
                       {"model_gflops", sb.gflops(step_s)}, {"ceiling_gflops", ceiling},
                       {"ceiling_share", share}, {"round_ceiling_shares", shares}, {"param_mb", param_mb},
                       {"activation_mb", act_mb}, {"alloc_peak_mb", alloc_mb}, {"step_peak_mb", step_peak_mb},
                       {"os_peak_mb", rss_mb}, {"grad_sync_wait_ms", wait_ms}, {"comm_mb_per_step", comm_mb},
                       {"rounds", rounds}};
      if (formula) report_formula(*formula, label, param_mb, comm_mb, j);
      if (have_handoff) j["handoff_ns"] = bench::median(handoffs), j["round_handoff_ns"] = handoffs;
      if (have_peer) {
        j["torch_images_per_s"] = bench::median(theirs), j["ratio_per_process"] = bench::median(ratios);
        j["round_ratios"] = ratios;
      }
      std::printf("%s\n", j.dump().c_str());
      if (json.is_open()) json << j.dump() << "\n";
      std::fflush(stdout);
    }
  }
  return 0;
}
