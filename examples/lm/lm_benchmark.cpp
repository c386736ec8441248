// lm_benchmark: a language model's training step (forward, backward, AdamW with llm.c's
// settings: lr 1e-4, betas 0.9 / 0.999, eps 1e-8, no weight decay) per plugin configuration
// and precision: tokens/s, model GFLOP/s and its share of the oneDNN matmul ceiling measured
// in the same run (model FLOPs: 6 x the parameters other than the position embeddings x
// tokens, plus the causal half of attention's products, 6 x B x T^2 x C x layers), the
// causal attention's own share, the time of each part of the step (attention, head + loss,
// linears, norms, optimizer, communication, the rest), the peak RSS, and the PyTorch peer's
// same step (bench/torch_lm_bench.py: as many processes as ranks, each a rank's threads and
// rows, under its DistributedDataParallel over gloo beyond one; alternated round by round with
// ours on one rank, its rounds first on several) with the ratio of the tokens/s of all ranks.
// A table on
// rank 0 and, with --json FILE, one line a configuration (the peer's first when measured).
// With --init (llm.c's gpt2_124M.bin) and --tokens (llm.c's token file, consecutive batches
// as llm.c's loader without shuffling) it trains from those weights on those tokens and
// prints llm.c's "step N: train loss X (took Y ms)" line for every step (scripts/lm_vs_peers.sh);
// --write-llmc FILE writes the model it would train as llm.c's checkpoint and exits.
//   mpirun -np 1 lm_benchmark --model gpt2 --batch 4 --seq 1024 --precisions fp32
//   mpirun -np 2 lm_benchmark --model gpt2 --batch 2 --seq 1024 --configs ddp.toml   (against PyTorch's DDP)
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "booster/booster.h"
#include "ceiling.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"
#include "data/token_stream.h"
#include "lm_setup.h"
#include "nn/llmc.h"
#include "optim/adam.h"
#include "peer.h"
#include "run_setup.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

struct ModelShape {
  int64_t layers = 0, width = 0, params = 0, position_params = 0;
};

// A GPT-2 (no dropout: llm.c's) or LLaMA preset, or llm.c's checkpoint, and its shape.
// The model of a preset, of llm.c's checkpoint `init`, or of an lm_train run config (its
// vocabulary, block, widths, dropout and model options: what booster_estimate estimates).
examples::LmModel build_model(const std::string& preset, const std::string& init, ModelShape& s,
                              const std::string& run_config = "", const std::vector<std::string>& run_sets = {}) {
  examples::LmModel m;
  if (!run_config.empty()) {
    Config cfg = Config::from_file(run_config, run_sets);
    cfg.apply(examples::lm_train_schema());
    m = examples::lm_run_model(cfg);
  } else {
    m = init.empty() ? examples::lm_model_from_preset(preset) : examples::lm_model_from_llmc(init);
  }
  if (auto* g = dynamic_cast<nn::GPT2LMHeadModel*>(m.module.get()))
    s = {g->config().n_layer, g->config().n_embd, 0, g->config().n_positions * g->config().n_embd};
  else if (auto* l = dynamic_cast<nn::LlamaForCausalLM*>(m.module.get()))
    s = {l->config().num_hidden_layers, l->config().hidden_size, 0, 0};  // rotary: no position parameters
  for (auto& [n, p] : m.module->named_parameters()) s.params += p.numel();
  return m;
}

// One boosted training step of a plugin configuration and precision, timed round by round.
class LmStep {
 public:
  LmStep(const std::string& config, const std::string& precision, const std::string& preset, const std::string& init,
         const std::string& tokens, int batch, int seq, uint64_t seed, bool fused_loss, const std::string& run_config = "",
         const std::vector<std::string>& run_sets = {})
      : batch_(batch), seq_(seq) {
    manual_seed(seed);
    model_ = build_model(preset, init, shape_, run_config, run_sets);
    if (run_config.empty()) model_.lm->fused_linear_cross_entropy = fused_loss;  // else the config's
    std::string mixed;
    std::shared_ptr<Plugin> plugin = examples::make_bench_plugin(config, precision, mixed);
    booster_.emplace(plugin, mixed);
    pipelined_ = plugin && plugin->support_pipeline();
    dp_ = plugin ? plugin->dp_size() : dist::world_size();
    optim::AdamOptions o;  // llm.c's gpt2_update(model, 1e-4, 0.9, 0.999, 1e-8, 0.0, step)
    o.lr = 1e-4, o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8, o.weight_decay = 0.0;
    boosted_ = booster_->boost(model_.module, std::make_shared<optim::AdamW>(model_.module->named_parameters(), o));
    criterion_ = model_loss_or(examples::token_cross_entropy(model_));
    const int replica = plugin ? plugin->dp_rank() : dist::world_rank();
    if (!tokens.empty()) {
      file_ = std::make_shared<data::TokenFile>(tokens);
      replica_ = replica;
    } else {  // random ids, each replica its own
      Tensor ids = Tensor::empty({batch, seq + 1});
      Generator(seed + 1, uint64_t(replica)).uniform_(ids, 0, double(model_.lm->vocab_size()));
      ids = ids.to(DType::i64);
      x_ = ids.narrow(1, 0, seq).contiguous(), y_ = ids.narrow(1, 1, seq).contiguous();
    }
  }

  /// One untimed step (primitive creation, first allocations) unless training from tokens,
  /// whose every step is the run's.
  void warm_up() {
    if (!file_) step();
    dist::barrier();
  }

  /// Seconds per step over `steps` steps, all ranks together.
  double seconds(int steps, bool print_steps) {
    dist::barrier();
    GradSync* sync = boosted_.model->grad_sync();
    if (sync) sync->reset_wait_seconds();
    dist::reset_traffic();
    host_tier().reset_peak();
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      const auto s0 = Clock::now();
      const double loss = step();
      if (print_steps && dist::world_rank() == 0)
        std::printf("step %d: train loss %f (took %f ms)\n", steps_done_ - 1, loss,
                    1e3 * std::chrono::duration<double>(Clock::now() - s0).count());
      std::fflush(stdout);
    }
    dist::barrier();
    comm_mb_ = double(dist::traffic_bytes()) / steps / (1 << 20);
    step_peak_mb_ = std::max(step_peak_mb_, dist::all_reduce_scalar(double(host_tier().peak_bytes()) / (1 << 20),
                                                                    dist::ReduceOp::max));
    sync_wait_s_ = dist::all_reduce_scalar((sync ? sync->wait_seconds() : 0.0) / steps, dist::ReduceOp::max);
    return std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  }

  /// The profile of `steps` more steps: each op's median, the parts of the step.
  bench::StepProfile profile(int steps) {
    return bench::profile_steps([this] { step(); }, steps);
  }

  double tokens_per_step() const { return double(batch_) * seq_ * dp_; }
  /// Model FLOPs of one step (all ranks), and the causal attention products' share of it.
  double step_flop() const { return 6.0 * double(shape_.params - shape_.position_params) * tokens_per_step() + attention_flop(); }
  double attention_flop() const { return 6.0 * double(batch_) * dp_ * double(seq_) * seq_ * shape_.width * shape_.layers; }
  /// The ceiling summed over ranks: the MLP's raw matmul at this batch (measured now).
  double ceiling_gflops(const std::string& precision) {
    const int64_t m = int64_t(batch_) * seq_;
    std::optional<bench::RawMatmul> c(std::in_place, m, shape_.width, 4 * shape_.width, dtype_from_name(precision));
    if (!c->ok()) c.emplace(m, shape_.width, 4 * shape_.width, DType::f32);
    return dist::all_reduce_scalar(c->gflops(), dist::ReduceOp::sum);
  }
  double comm_mb() const { return comm_mb_; }
  /// The allocator's peak over the timed steps, the largest rank's (MB; boost's own transients left out).
  double step_peak_mb() const { return step_peak_mb_; }
  /// Seconds a step of the last seconds() waited for gradient communication after backward
  /// (the slowest rank; DDP's and ZeRO's GradSync).
  double sync_wait_seconds() const { return sync_wait_s_; }
  int64_t params() const { return shape_.params; }
  const examples::LmModel& model() const { return model_; }

 private:
  // The step's loss (the global batch's mean).
  double step() {
    Tensor x = x_, y = y_;
    if (file_) next_batch(x, y);
    boosted_.optimizer->zero_grad();
    Tensor loss;
    const TensorMap batch{{"input_ids", x}, {"labels", y}};
    if (pipelined_) {
      loss = booster_->execute_pipeline(single_batch(batch), *boosted_.model, criterion_, boosted_.optimizer.get()).loss;
    } else {  // the loss from the model where it fuses its head with it, else from its logits
      loss = criterion_(boosted_.model->forward_named(batch), batch);
      booster_->backward(loss, *boosted_.optimizer);
    }
    boosted_.optimizer->step();
    ++steps_done_;
    return booster_->mean_loss(loss);
  }
  // llm.c's loader without shuffling: batch k is tokens [k B T, k B T + B T + 1) of the
  // replica's share (replica r reads the batch after r others, as llm.c's processes do).
  void next_batch(Tensor& x, Tensor& y) {
    const int64_t bt = int64_t(batch_) * seq_, n = (file_->size() - 1) / (bt * dp_);
    BOOSTER_CHECK(n >= 1, file_->path(), ": ", file_->size(), " tokens, fewer than one batch of ", bt * dp_ + 1);
    const int64_t start = ((steps_done_ % n) * dp_ + replica_) * bt;
    std::vector<int64_t> ids(size_t(bt + 1));
    for (int64_t i = 0; i <= bt; ++i) ids[size_t(i)] = (*file_)[start + i];
    Tensor all = Tensor::from_ints(ids, {bt + 1});
    x = all.narrow(0, 0, bt).view({batch_, seq_}).contiguous();
    y = all.narrow(0, 1, bt).contiguous().view({batch_, seq_});
  }

  int batch_, seq_, dp_ = 1, replica_ = 0, steps_done_ = 0;
  ModelShape shape_;
  examples::LmModel model_;
  std::optional<Booster> booster_;
  BoostResult<nn::Module> boosted_;
  StageCriterion criterion_;
  std::shared_ptr<data::TokenFile> file_;
  Tensor x_, y_;
  bool pipelined_ = false;
  double comm_mb_ = 0, sync_wait_s_ = 0, step_peak_mb_ = 0;
};

// The parts of a step, by the profiler's op names (forward, and backward as "<op> bwd").
const std::vector<std::pair<std::string, std::vector<std::string>>> kParts = {
    {"attention", {"causal attention", "causal_attention"}},  // the forward scope, the backward node
    {"head+loss", {"lm head", "cross_entropy", "vocab_parallel_cross_entropy", "lm head + loss", "linear_cross_entropy"}},
    {"linears", {"linear", "matmul"}},
    {"norms", {"layer_norm", "rms_norm"}},
    {"optimizer", {"optimizer step"}},
    {"communication", {"zero reduce-scatter wait", "zero all-gather wait", "zero all-gather"}},  // + GradSync's wait
};

double part_seconds(const bench::StepProfile& p, const std::vector<std::string>& ops) {
  std::vector<std::string> both = ops;
  for (auto& o : ops) both.push_back(o + " bwd");
  return p.seconds_of(both);
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return dist::all_reduce_scalar(double(ru.ru_maxrss) / 1024.0, dist::ReduceOp::max);
}

// Every rank waits here without spinning (Open MPI's waits spin on a core): while rank 0 runs
// the peer, the other ranks leave it the machine.
void quiet_barrier() {
  auto w = dist::barrier(dist::ProcessGroup::world(), true);
  while (!w->test()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The peer's last line: "step_s=S tokens_s=R peak_rss_mb=M loss=L".
struct LmPeer {
  double step_s = 0, tokens_s = 0, rss_mb = 0;
};
// ranks > 1: that many processes under PyTorch's DistributedDataParallel (gloo), batch rows each.
std::optional<LmPeer> run_lm_peer(const std::string& script, const std::string& model, int batch, int seq, int steps,
                                  int threads, bool bf16, int ranks) {
  const std::string cmd = "/usr/bin/python3 " + script + " --model " + model + " --batch " + std::to_string(batch) +
                          " --seq " + std::to_string(seq) + " --steps " + std::to_string(steps + 1) + " --threads " +
                          std::to_string(threads) + (bf16 ? " --bf16" : "") +
                          (ranks > 1 ? " --ddp " + std::to_string(ranks) : "");
  const std::optional<std::string> out = bench::run_capture(cmd);
  static const std::regex re(R"(step_s=([0-9.]+) tokens_s=([0-9.]+) peak_rss_mb=([0-9.]+))");
  std::smatch m;
  if (!out || !std::regex_search(*out, m, re)) {
    std::fprintf(stderr, "the PyTorch peer failed (%s):\n%s\n", cmd.c_str(), out ? out->c_str() : "");
    return std::nullopt;
  }
  return LmPeer{std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
}

// What llm.c's train_gpt2 reads from its working folder: gpt2_124M.bin (the model this
// benchmark would train, vocabulary padded to 50,304 for GPT-2's as llm.c pads it) and
// dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (the text's characters as
// tokens, nanoGPT's 90 / 10 split).
void write_llmc_folder(const std::string& dir, const std::string& preset, const std::string& text, uint64_t seed) {
  namespace fs = std::filesystem;
  manual_seed(seed);
  ModelShape s;
  examples::LmModel m = build_model(preset, "", s);
  auto* g = dynamic_cast<nn::GPT2LMHeadModel*>(m.module.get());
  BOOSTER_CHECK(g != nullptr, "--write-llmc: llm.c trains GPT-2; ", preset, " is a ", m.module->type_name());
  fs::create_directories(fs::path(dir) / "dev/data/tinyshakespeare");
  nn::save_llmc(*g, (fs::path(dir) / "gpt2_124M.bin").string(), g->config().vocab_size == 50257 ? 50304 : 0);
  const data::TextCache cache = data::tokenize_text_cached(text, (fs::path(dir) / "cache").string());
  for (auto [bin, name] : {std::pair{cache.train_bin, "train"}, std::pair{cache.val_bin, "val"}}) {
    data::TokenFile f(bin);
    std::vector<int64_t> ids(size_t(f.size()));
    for (int64_t i = 0; i < f.size(); ++i) ids[size_t(i)] = f[i];
    data::write_llmc_tokens((fs::path(dir) / "dev/data/tinyshakespeare" / (std::string("tiny_shakespeare_") + name + ".bin")).string(), ids);
  }
  std::printf("wrote %s: gpt2_124M.bin (%s, %lld parameters) and tinyshakespeare's %lld characters as llm.c's tokens\n",
              dir.c_str(), preset.c_str(), (long long)s.params, (long long)cache.vocab_size);
}

// The command line.
struct Options {
  std::string configs = "none", precisions = "fp32", preset = "gpt2", json_path, init, tokens, write_llmc, run_config;
  std::vector<std::string> run_sets;
  std::string text = std::string(BOOSTER_SOURCE_DIR) + "/../shared/data/tinyshakespeare/input.txt";
  std::string peer_script = std::string(BOOSTER_SOURCE_DIR) + "/bench/torch_lm_bench.py";
  int batch = 4, seq = 1024, steps = 3, rounds = 1, profile_steps = 2, fused_loss = 1;
  uint64_t seed = 1337;
  bool no_peer = false, print_steps = false, show_profile = false;
};

// One configuration and precision's figures (every rank takes part; rank 0's are reported).
struct Row {
  std::vector<double> ours, ceilings, shares, theirs, ratios, peer_rss;
  double step_s = 0, ceiling = 0, share = 0, attention_share = 0, rss = 0;
  nlohmann::json parts;
};

// The peer's run: as many processes as ranks, each with a rank's threads and rows (DDP over
// gloo beyond one), run alone: the ranks wait quietly meanwhile. Rank 0's result.
std::optional<LmPeer> peer_round(const Options& o, const std::string& prec) {
  std::optional<LmPeer> p;
  if (dist::world_rank() == 0)
    p = run_lm_peer(o.peer_script, o.preset, o.batch, o.seq, o.steps, dist::omp_threads(), prec == "bf16",
                    dist::world_size());
  quiet_barrier();
  return p;
}

// peer: one process, alternated round by round with ours. `alone`: the peer's rounds measured
// before our model was built (several ranks: their models and as many PyTorch processes do not
// fit in this machine's memory together), set against our median step.
Row measure(const Options& o, LmStep& sb, const std::string& prec, bool peer, const std::vector<LmPeer>& alone) {
  Row r;
  auto take = [&](const LmPeer& p, double ours_s) {
    r.theirs.push_back(p.tokens_s), r.peer_rss.push_back(p.rss_mb);
    r.ratios.push_back(sb.tokens_per_step() / ours_s / p.tokens_s);
  };
  sb.warm_up();
  for (int round = 0; round < o.rounds; ++round) {
    if (round > 0) sb.warm_up();
    const double before = sb.ceiling_gflops(prec);
    r.ours.push_back(sb.seconds(o.steps, o.print_steps));
    r.ceilings.push_back(std::max(before, sb.ceiling_gflops(prec)));
    r.shares.push_back(sb.step_flop() / r.ours.back() / 1e9 / r.ceilings.back());
    if (!peer) continue;
    if (auto p = peer_round(o, prec)) take(*p, r.ours.back());
  }
  r.step_s = bench::median(r.ours), r.ceiling = bench::median(r.ceilings), r.share = bench::median(r.shares);
  for (const LmPeer& p : alone) take(p, r.step_s);
  if (o.profile_steps > 0) {
    const bench::StepProfile p = sb.profile(o.profile_steps);
    if (o.show_profile && dist::world_rank() == 0)
      std::printf("per-op profile (medians of %d steps):\n%s", o.profile_steps, Profiler::report(p.entries).c_str());
    double named = sb.sync_wait_seconds();
    for (auto& [part, ops] : kParts) {
      const double s = part_seconds(p, ops);
      r.parts[part + "_ms"] = 1e3 * s, named += s;
    }
    r.parts["communication_ms"] = r.parts["communication_ms"].get<double>() + 1e3 * sb.sync_wait_seconds();
    r.parts["other_ms"] = 1e3 * std::max(0.0, p.wall - named), r.parts["step_ms"] = 1e3 * p.wall;
    // The causal half's FLOPs of this rank against this rank's share of the ceiling.
    const double attn_s = part_seconds(p, kParts[0].second);
    if (attn_s > 0) r.attention_share = sb.attention_flop() / attn_s / 1e9 / r.ceiling;
  }
  r.rss = peak_rss_mb();
  return r;
}

// The table's row and the JSON lines (the peer's first, ours last).
void report(const Options& o, const LmStep& sb, const std::string& cfg, const std::string& prec, const Row& r,
            std::ofstream& json) {
  const double tps = sb.tokens_per_step() / r.step_s;
  const bool have_peer = !r.theirs.empty();
  std::printf("%-24s %-5s %5d | %9.1f %8.1f %5.0f%% %5.0f%% | %9.0f %8.1f | %10s %6s %9s\n", cfg.c_str(), prec.c_str(),
              dist::world_size(), tps, sb.step_flop() / r.step_s / 1e9, 100 * r.share, 100 * r.attention_share, r.rss,
              sb.comm_mb(), have_peer ? std::to_string(bench::median(r.theirs)).substr(0, 7).c_str() : "-",
              have_peer ? std::to_string(bench::median(r.ratios)).substr(0, 4).c_str() : "-",
              have_peer ? std::to_string(int64_t(bench::median(r.peer_rss))).c_str() : "-");
  if (o.profile_steps > 0) std::printf("  parts (ms, medians of %d steps): %s\n", o.profile_steps, r.parts.dump().c_str());
  const nlohmann::json base{{"model", !o.run_config.empty() ? "the model of " + o.run_config : o.init.empty() ? o.preset : "llm.c checkpoint " + o.init}, {"precision", prec},
                            {"ranks", dist::world_size()}, {"batch_per_rank", o.batch}, {"seq", o.seq},
                            {"parameters", sb.params()}, {"fused_linear_cross_entropy", sb.model().lm->fused_linear_cross_entropy}};
  std::vector<nlohmann::json> lines;
  if (have_peer) {
    nlohmann::json j = base;
    j["peer"] = "pytorch", j["config"] = "torch", j["tokens_per_s"] = bench::median(r.theirs);
    j["peak_rss_mb"] = bench::median(r.peer_rss), j["threads"] = dist::omp_threads();
    lines.push_back(j);
  }
  nlohmann::json j = base;
  j["peer"] = "ours", j["config"] = cfg, j["tokens_per_s"] = tps, j["model_gflops"] = sb.step_flop() / r.step_s / 1e9;
  j["ceiling_gflops"] = r.ceiling, j["ceiling_share"] = r.share, j["round_ceiling_shares"] = r.shares;
  j["attention_ceiling_share"] = r.attention_share, j["peak_rss_mb"] = r.rss, j["comm_mb_per_step"] = sb.comm_mb();
  j["step_peak_mb"] = sb.step_peak_mb();
  j["parts"] = r.parts, j["rounds"] = o.rounds;
  if (have_peer) j["ratio_per_process"] = bench::median(r.ratios), j["round_ratios"] = r.ratios;
  lines.push_back(j);
  for (auto& l : lines) {
    std::printf("%s\n", l.dump().c_str());
    if (json.is_open()) json << l.dump() << "\n";
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Language-model training-step benchmark per plugin configuration and precision"};
  Options o;
  app.add_option("--configs", o.configs, "comma-separated plugin configs (TOML with a [plugin] table) or none");
  app.add_option("--precisions", o.precisions, "comma-separated: fp32, bf16");
  app.add_option("--model", o.preset, "a GPT-2 preset (gpt2, gpt2-medium, gpt2-tiny, ...) or a LLaMA one (llama-tiny, ...)");
  app.add_option("--batch", o.batch, "sequences per data-parallel rank")->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens a sequence")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "rounds of ours then the peer, alternated; medians reported")->check(CLI::PositiveNumber);
  app.add_option("--profile-steps", o.profile_steps, "steps the parts' profile takes medians over (0: no profile)");
  app.add_option("--json", o.json_path, "also append JSON lines here");
  app.add_option("--peer-script", o.peer_script, "torch_lm_bench.py");
  app.add_flag("--no-peer", o.no_peer, "skip the PyTorch peer");
  app.add_option("--run-config", o.run_config, "the model of this lm_train config instead of --model (no peer)");
  app.add_option("--run-set", o.run_sets, "override a key of --run-config");
  app.add_option("--init", o.init, "start from llm.c's GPT-2 checkpoint (gpt2_124M.bin layout)");
  app.add_option("--tokens", o.tokens, "train on llm.c's (or nanoGPT's uint16) token file, consecutive batches");
  app.add_flag("--profile", o.show_profile, "also print every op of the profiled steps");
  app.add_flag("--print-steps", o.print_steps, "print llm.c's 'step N: train loss X (took Y ms)' line for each step");
  app.add_option("--write-llmc", o.write_llmc, "write the model and --text's tokens in llm.c's files to this folder and exit");
  app.add_option("--text", o.text, "--write-llmc: the text whose characters are the tokens");
  app.add_option("--seed", o.seed, "the model's and the random tokens' seed");
  app.add_option("--fused-linear-cross-entropy", o.fused_loss,
                 "1: the head and its loss a block of tokens at a time (Liger's fused_linear_cross_entropy); 0: whole logits")
      ->check(CLI::Range(0, 1));
  CLI11_PARSE(app, argc, argv);
  dist::launch();
  const bool master = dist::world_rank() == 0;
  if (!o.write_llmc.empty()) {
    if (master) write_llmc_folder(o.write_llmc, o.preset, o.text, o.seed);
    return 0;
  }
  // Every rank knows whether the peer runs (rank 0 runs it, the others wait for it).
  const bool peer = !o.no_peer && o.init.empty() && o.run_config.empty() &&
                    dist::all_reduce_scalar(master && bench::peer_available() ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  std::ofstream json;
  if (master && !o.json_path.empty()) json.open(o.json_path, std::ios::app);
  if (master)
    std::printf("%-24s %-5s %5s | %9s %8s %6s %6s | %9s %8s | %10s %6s %9s\n", "config", "prec", "ranks", "tokens/s",
                "GFLOP/s", "ceil%", "attn%", "rss MB", "comm MB", "torch t/s", "ratio", "torch MB");
  for (auto& cfg : bench::split_list(o.configs))
    for (auto& prec : bench::split_list(o.precisions)) {
      std::vector<LmPeer> alone;  // several ranks: the peer first, before our model exists (see measure)
      for (int round = 0; peer && dist::world_size() > 1 && round < o.rounds; ++round)
        if (auto p = peer_round(o, prec)) alone.push_back(*p);
      LmStep sb(cfg, prec, o.preset, o.init, o.tokens, o.batch, o.seq, o.seed, o.fused_loss != 0, o.run_config, o.run_sets);
      const Row r = measure(o, sb, prec, peer && dist::world_size() == 1, alone);
      if (master) report(o, sb, cfg, prec, r, json);
    }
  return 0;
}
