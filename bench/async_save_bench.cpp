// async_save_bench: what a checkpoint every N steps costs a training run. Per plugin
// configuration, windows of N steps are timed in one process, alternated round by round:
// without a save, with a run checkpoint (sharded model and optimizer, progress, keep_last 1)
// saved synchronously in the window's middle, and the same with use_async (the state copied,
// the writing done behind the steps that follow; the window ends with synchronize(), so a
// save still in flight counts). Prints each row's seconds a window, its overhead against the
// window without a save, and how long the save call held training. A use_async save in the
// warm-up makes the staging memory (kept between saves) before the windows, as a run has it
// after its first checkpoint; what that first save held is printed too.
//   mpirun -np 2 build/bench/async_save_bench --model gpt2-medium --seq 256
//     --configs examples/vit/configs/torch_ddp.toml,examples/vit/configs/low_level_zero.toml,examples/vit/configs/gemini.toml
#include <CLI/CLI.hpp>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "booster/booster.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "examples/lm/lm_setup.h"
#include "examples/vit/run_setup.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"

using namespace booster;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// One plugin configuration's boosted model, its batch and its step.
class BenchRun {
 public:
  BenchRun(const std::string& model, const std::string& config, const std::string& precision, int batch, int seq) {
    manual_seed(7);
    std::string mixed;
    std::shared_ptr<Plugin> plugin = examples::make_bench_plugin(config, precision, mixed);
    booster_ = std::make_shared<Booster>(plugin, mixed);
    std::shared_ptr<nn::Module> module;
    if (model.rfind("vit", 0) == 0) {
      nn::ViTConfig c = nn::ViTConfig::preset(model);
      c.num_labels = 3;
      module = std::make_shared<nn::ViTForImageClassification>(c);
      Tensor x = Tensor::empty({batch, 3, c.image_size, c.image_size});
      Generator(1).normal_(x);
      batch_ = {{"pixel_values", x}, {"labels", Tensor::from_ints(std::vector<int64_t>(size_t(batch), 1), {batch})}};
      criterion_ = on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); });
    } else {
      examples::LmModel m = examples::lm_model_from_preset(model);
      m.lm->fused_linear_cross_entropy = true;
      module = m.module;
      Tensor ids = Tensor::empty({batch, seq + 1});
      Generator(1).uniform_(ids, 0, double(m.lm->vocab_size()));
      ids = ids.to(DType::i64);
      batch_ = {{"input_ids", ids.narrow(1, 0, seq).contiguous()}, {"labels", ids.narrow(1, 1, seq).contiguous()}};
      criterion_ = model_loss_or(examples::token_cross_entropy(m));
    }
    params_ = 0;
    for (auto& [n, p] : module->named_parameters()) params_ += p.numel();
    optim::AdamOptions o;
    o.lr = 1e-5;
    boosted_ = booster_->boost(module, std::make_shared<optim::AdamW>(module->named_parameters(), o));
  }

  void step() {
    boosted_.optimizer->zero_grad();
    Tensor loss = criterion_(boosted_.model->forward_named(batch_), batch_);
    booster_->backward(loss, *boosted_.optimizer);
    boosted_.optimizer->step();
  }

  /// A run checkpoint of step `step` under dir (keep_last 1); returns the seconds it held training.
  double save(const std::string& dir, int64_t step, bool use_async) {
    proto::TrainingProgress p;
    p.set_step(step);
    const double t0 = now();
    save_run_checkpoint(*booster_, RunState{boosted_.model.wrapper().get(), boosted_.optimizer.get(), nullptr, {}}, dir, true, 1, p, use_async);
    return now() - t0;
  }
  void synchronize() { booster_->checkpoint_io().synchronize(); }
  int64_t params() const { return params_; }

 private:
  std::shared_ptr<Booster> booster_;
  BoostResult<nn::Module> boosted_;
  TensorMap batch_;
  StageCriterion criterion_;
  int64_t params_ = 0;
};

struct Row {
  const char* name;
  int mode;  // 0: no save, 1: synchronous, 2: use_async
  std::vector<double> window, held;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the step-time cost of a checkpoint every N steps, synchronous and with use_async"};
  std::string model = "gpt2-medium", configs = "examples/vit/configs/torch_ddp.toml", precision = "bf16", dir;
  int batch = 1, seq = 256, every = 50, rounds = 1;
  app.add_option("--model", model, "a ViT preset (vit-base, ...) or a language-model preset (gpt2-medium, ...)");
  app.add_option("--configs", configs, "comma-separated plugin configs ([plugin] tables), or none");
  app.add_option("--precision", precision, "fp32 or bf16");
  app.add_option("--batch", batch, "rows a step on each rank");
  app.add_option("--seq", seq, "tokens a row (language models)");
  app.add_option("--every", every, "steps a window: one save in each");
  app.add_option("--rounds", rounds, "rounds of the three rows; medians reported");
  app.add_option("--dir", dir, "where the checkpoints go (default: a temporary folder, removed after)");
  CLI11_PARSE(app, argc, argv);
  dist::launch();
  const bool master = dist::world_rank() == 0;
  const bool own_dir = dir.empty();
  if (own_dir)  // rank 0's name for a folder every rank writes into
    dir = dist::all_gather_bytes((fs::temp_directory_path() / ("booster_async_save_" + std::to_string(::getpid()))).string())[0];
  for (const std::string& config : bench::split_list(configs)) {
    BenchRun run(model, config, precision, batch, seq);
    run.step();  // warm-up: primitives, optimizer states, Gemini's chunk order
    run.step();
    // And one asynchronous save: its staging memory is then there, as in a run past its
    // first checkpoint (the first save of a kind pays for fresh pages; `held` shows it).
    const double first_held = run.save(dir, 0, true);
    run.synchronize();
    std::vector<Row> rows = {{"no save", 0, {}, {}}, {"synchronous", 1, {}, {}}, {"use_async", 2, {}, {}}};
    int64_t step = 0;
    for (int r = 0; r < rounds; ++r)
      for (Row& row : rows) {
        dist::barrier();
        const double t0 = now();
        for (int s = 0; s < every; ++s) {
          run.step();
          ++step;
          if (row.mode && s == every / 2) row.held.push_back(run.save(dir, step, row.mode == 2));
        }
        run.synchronize();
        dist::barrier();
        row.window.push_back(now() - t0);
      }
    if (master) {
      std::printf("%s, %s, %s, %lld parameters, %d rank(s) x %d threads, batch %d%s, a save every %d steps\n",
                  model.c_str(), config.c_str(), precision.c_str(), (long long)run.params(), dist::world_size(),
                  omp_get_max_threads(), batch, model.rfind("vit", 0) == 0 ? "" : (" x " + std::to_string(seq)).c_str(),
                  every);
      std::printf("  the warm-up's use_async save (its staging memory fresh) held training %.2f s\n", first_held);
      std::printf("  %-12s %10s %10s %10s %14s\n", "row", "window s", "step s", "overhead", "save held s");
      const double base = bench::median(rows[0].window);
      for (Row& row : rows) {
        const double w = bench::median(row.window);
        std::printf("  %-12s %10.2f %10.3f %9.1f%% %14.2f\n", row.name, w, w / every, 100.0 * (w / base - 1.0),
                    row.held.empty() ? 0.0 : bench::median(row.held));
      }
      std::fflush(stdout);
    }
    dist::barrier();
    if (master && own_dir) fs::remove_all(dir);
    dist::barrier();
  }
}
