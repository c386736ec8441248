// lm_train: nanoGPT's training loop for a character-level GPT-2 or LLaMA on tinyshakespeare, as a
// Booster loop under any plugin. nanoGPT's names: train.max_iters, eval_interval,
// eval_iters, block_size, warmup_iters, lr_decay_iters, min_lr; train.batch_size is per
// data-parallel rank. The text is tokenized by characters once into data.cache_dir (the
// first 90 % trains, the last 10 % validates, as nanoGPT splits it); training windows are
// drawn at random, each evaluation scores eval_iters fresh random batches of both splits'
// windows. The run folder gets metrics.jsonl ({"type": "eval", "step", "train_loss",
// "val_loss"} every eval_interval iterations; {"type": "step", ...} every log_interval),
// TensorBoard events, checkpoints, and a sample of the text the model writes.
// Usage: mpirun -np 2 lm_train --config examples/lm/configs/shakespeare_char.toml [--set key=value ...]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "booster/trainer/checkpoint_hook.h"
#include "booster/trainer/hooks.h"
#include "core/common/profiler.h"
#include "core/dist/logger.h"
#include "core/dist/runtime.h"
#include "lm_setup.h"
#include "lora_setup.h"
#include "plugins/registry.h"
#include "run_io.h"
#include "run_setup.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

// After each evaluation: the log line, the "eval" record and the best validation loss
// (checkpoints keep it); every log_interval iterations a "step" record.
class EvalRecordHook : public BaseHook {
 public:
  EvalRecordHook(std::shared_ptr<examples::MetricsLog> log, int64_t log_interval)
      : BaseHook(20), log_(std::move(log)), every_(log_interval) {}
  void before_train_iter(Trainer&) override { t0_ = std::chrono::steady_clock::now(); }
  void after_train_iter(Trainer& t, const IterationOutput&) override {
    step_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
    if (every_ <= 0 || !t.stepped() || t.optimizer_steps() % every_ != 0) return;
    log_->write({{"type", "step"}, {"step", t.optimizer_steps()}, {"loss", t.metric(Mode::train, "Loss").last_step_value()},
                 {"lr", t.metric(Mode::train, "LR").last_step_value()}});
  }
  /// The median wall time of a training iteration (data, forward, backward, step).
  double median_step_ms() const {
    if (step_ms_.empty()) return 0;
    std::vector<double> v(step_ms_);
    std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  void after_test_epoch(Trainer& t) override {
    const double train = t.metric(Mode::train, "Loss").accumulated_value();
    const double val = t.metric(Mode::test, "Loss").accumulated_value();
    auto& best = t.records()["best_val_loss"];
    if (best == 0 || val < best) best = val;
    log_->write({{"type", "eval"}, {"step", t.optimizer_steps()}, {"train_loss", train}, {"val_loss", val},
                 {"val_perplexity", std::exp(val)}});
    dist::logger().info("step {}: train loss {:.4f}, val loss {:.4f} (best {:.4f})", t.optimizer_steps(), train, val, best);
  }

 private:
  std::shared_ptr<examples::MetricsLog> log_;
  int64_t every_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> step_ms_;
};

int train(const Config& cfg_in, const std::vector<std::string>& overrides, const std::string& resume, bool progress) {
  Config cfg = cfg_in;
  auto plugin = cfg.has("plugin") ? plugins::make_plugin(cfg) : nullptr;
  Booster booster(plugin, cfg.get_string("booster.mixed_precision"));
  const int dp = plugin ? plugin->dp_size() : dist::world_size();
  const int lr_replicas = examples::keep_checkpoint_batch(cfg, dp, resume);  // another dp size: the same global batch
  const int64_t k = cfg.get_int("train.gradient_accumulation");
  examples::LmRun run = examples::make_lm_run(cfg, dp, plugin.get(), &booster, lr_replicas);
  auto [model, optimizer, criterion, loader, scheduler] =
      booster.boost(run.model.module, run.optimizer, examples::token_cross_entropy(run.model), run.train_loader, run.scheduler);
  const fs::path dir = fs::path(cfg.get_string("run.output_dir")) / cfg.get_string("run.name");
  const bool master = !dist::is_initialized() || dist::world_rank() == 0;
  auto log = std::make_shared<examples::MetricsLog>(dir.string(), !resume.empty(), master);
  log->write({{"type", "run"}, {"world_size", dist::world_size()}, {"parameters", run.parameters},
              {"plugin", plugin ? plugin->name() : "none"}, {"overrides", overrides}});
  SaveCheckpointOptions co;
  co.interval = cfg.get_int("checkpoint.every_iters") * k;  // the Trainer counts batches
  co.save_by_iter = true;
  co.checkpoint_dir = (dir / "checkpoints").string();
  co.lr_scheduler = scheduler;
  co.keep_last = int(cfg.get_int("checkpoint.keep_last"));
  co.use_async = cfg.get_bool("checkpoint.use_async");
  co.resume = resume;
  co.side_files = run.side_files;
  // The model's own loss where it fuses its head with it (model.fused_linear_cross_entropy),
  // else the criterion on its logits.
  Trainer trainer(booster, model.wrapper(), optimizer, model_loss_or(criterion),
                  {.clip_grad_norm = cfg.get_float("train.grad_clip"), .gradient_accumulation = k});
  dist::logger().info("{} {} ({} parameters) on {} rank(s) x {} threads, {} iterations of {} x {} x {} tokens",
                      run.model.family == "llama" ? "LLaMA" : "GPT-2", cfg.get_string("model.preset"), run.parameters, dist::world_size(), dist::omp_threads(),
                      cfg.get_int("train.max_iters"), dp, cfg.get_int("train.batch_size"), cfg.get_int("train.block_size"));
  auto records = std::make_shared<EvalRecordHook>(log, cfg.get_int("train.log_interval"));
  trainer.fit({.train_dataloader = loader,
               .epochs = run.evaluations,
               .test_dataloader = run.val_loader,
               .hooks = {std::make_shared<LossHook>(), std::make_shared<LRSchedulerHook>(scheduler, false),
                         std::make_shared<SaveCheckpointHook>(co), records},
               .display_progress = progress,
               .log_interval = cfg.get_int("train.log_interval")});
  examples::save_lora_from_config(booster, *model, cfg, dir);
  if (master && Profiler::enabled()) std::printf("%s", Profiler::report().c_str());  // BOOSTER_PROFILE=1
  // The final model over more validation batches than an evaluation's (its estimate moves
  // less), then the sample.
  double final_val = 0;
  if (run.final_val_loader) {
    trainer.evaluate(*run.final_val_loader, {std::make_shared<LossHook>()});
    final_val = trainer.metric(Mode::test, "Loss").accumulated_value();
  }
  // A pipeline stage holds only its layers: the sample comes from the final checkpoint, whole.
  const bool staged = plugin && plugin->support_pipeline();
  examples::LmModel whole = staged ? examples::load_checkpoint_model(co.checkpoint_dir) : run.model;
  const std::string sample = examples::sample_text(whole, run.codec, cfg);
  if (master) {
    const double ms = records->median_step_ms();
    std::printf("best val loss %.4f, %.1f ms/iter (median)", trainer.records()["best_val_loss"], ms);
    if (run.final_val_loader)
      std::printf(", final val loss %.4f over %lld batches", final_val, (long long)cfg.get_int("train.final_eval_iters"));
    std::printf("\n---- sample ----\n%s\n----\n", sample.c_str());
    log->write({{"type", "final"}, {"best_val_loss", trainer.records()["best_val_loss"]}, {"ms_per_iter", ms},
                {"final_val_loss", final_val}, {"final_eval_iters", cfg.get_int("train.final_eval_iters")}});
    log->write({{"type", "sample"}, {"text", sample}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a character-level GPT-2 or LLaMA on tinyshakespeare with a booster-cpp plugin (nanoGPT's recipe)"};
  std::string config_path, resume;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "run config (TOML)");
  app.add_option("--set", overrides, "override a config key: --set train.max_iters=200");
  app.add_option("--resume", resume, "continue from a checkpoint folder (a step-N folder or its parent)");
  bool no_progress = false;
  app.add_flag("--no-progress", no_progress, "plain log lines instead of a progress bar");
  CLI11_PARSE(app, argc, argv);
  Config cfg = config_path.empty() ? Config::from_string("", "<defaults>", overrides) : Config::from_file(config_path, overrides);
  cfg.apply(examples::lm_train_schema());
  dist::launch({uint64_t(cfg.get_int("train.seed"))});
  dist::configure_logging({cfg.get_string("log.level"), false, ""});
  return train(cfg, overrides, resume, !no_progress);
}
