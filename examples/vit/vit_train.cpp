// vit_train: fine-tune (or train from scratch) a Vision Transformer on beans with any
// plugin — the Booster loop of Colossal-AI's vit_train_demo.py. Swapping plugins is a
// change of config. Launch: mpirun -np N vit_train --config configs/<name>.toml [--set k=v]
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "booster/auto_precision.h"
#include "booster/booster.h"
#include "booster/dist_coordinator.h"
#include "booster/trainer/checkpoint_hook.h"
#include "booster/trainer/hooks.h"
#include "core/dist/collectives.h"
#include "core/dist/logger.h"
#include "core/common/file_util.h"
#include "core/dist/runtime.h"
#include "core/tensor/offload_store.h"
#include "data/transforms.h"
#include "plugins/registry.h"
#include "run_io.h"
#include "lora_setup.h"
#include "run_setup.h"
#include "train_config.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

struct Cli {
  std::string config_path, resume, checkpoint, split;  // split empty: the run's validation split
  std::vector<std::string> overrides;
  bool no_progress = false, eval_only = false;
};

// The loss of the example: cross entropy on hard labels, or on Mixup's soft targets.
Criterion make_criterion(double label_smoothing) {
  return [label_smoothing](const Tensor& logits, const Tensor& labels) {
    if (labels.dtype() == DType::i64) return cross_entropy(logits, labels, {-100, label_smoothing});
    return cross_entropy_soft(logits, labels, label_smoothing);
  };
}

// A sharded loader over the whole split for evaluation: each data-parallel replica scores its
// share (the ranks of one tensor-parallel replica score the same images together).
std::unique_ptr<data::DataLoader> eval_loader(std::shared_ptr<const data::Dataset> ds, const Config& cfg,
                                              const Plugin* plugin = nullptr) {
  DistCoordinator c;
  const int replicas = plugin ? plugin->dp_size() : c.world_size(), rank = plugin ? plugin->dp_rank() : c.rank();
  data::DataLoaderOptions o;
  o.batch_size = cfg.get_int("train.batch_size");
  o.num_workers = int(cfg.get_int("data.num_workers"));
  auto sampler = std::make_shared<data::InferenceShardSampler>(ds->size(), replicas, rank);
  return std::make_unique<data::DataLoader>(std::move(ds), o, sampler);
}

// The test metrics of the last evaluation: totals, then per class, then the confusion matrix.
void print_eval(const Trainer& t, const std::vector<std::string>& names, const std::string& split) {
  const auto& acc = dynamic_cast<const AccuracyMetric&>(t.metric(Mode::test, "Accuracy"));
  std::printf("%s: %lld images, accuracy %.4f, loss %.4f\n", split.c_str(), (long long)acc.samples(),
              acc.accumulated_value(), t.metric(Mode::test, "Loss").accumulated_value());
  const auto per_class = acc.per_class_accuracy();
  for (size_t i = 0; i < names.size(); ++i) std::printf("  %-20s accuracy %.4f\n", names[i].c_str(), per_class[i]);
  std::printf("confusion matrix (rows: true, columns: predicted)\n%-20s", "");
  for (auto& n : names) std::printf(" %12.12s", n.c_str());
  std::printf("\n");
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("%-20s", names[i].c_str());
    for (size_t k = 0; k < names.size(); ++k) std::printf(" %12lld", (long long)acc.confusion()[i][k]);
    std::printf("\n");
  }
}

// --eval-only: scores the newest checkpoint under --checkpoint on --split (whole split).
int eval_only(Config& cfg, const Cli& cli) {
  BOOSTER_CHECK(!cli.checkpoint.empty(), "--eval-only needs --checkpoint <folder>");
  auto step_dir = latest_checkpoint(cli.checkpoint);
  BOOSTER_CHECK_T(IOError, step_dir.has_value(), "no complete checkpoint under '", cli.checkpoint, "'");
  verify_run_checkpoint(*step_dir);
  const auto proc = fs::exists(fs::path(*step_dir) / "preprocessor_config.json")
                        ? data::ViTImageProcessor::from_pretrained(*step_dir)
                        : data::ViTImageProcessor();
  // The data the run trained on, unless the command line or the config file says otherwise.
  std::vector<std::string> user_keys;
  for (auto& o : cli.overrides) user_keys.push_back(o.substr(0, o.find('=')));
  if (!cli.config_path.empty()) {
    const Config given = Config::from_file(cli.config_path);
    for (const char* k : {"data.dataset", "data.root", "data.val_split"})
      if (given.has(k)) user_keys.push_back(k);
  }
  const std::string split = examples::apply_data_record(cfg, *step_dir, user_keys, cli.split);
  auto ds = examples::eval_split(cfg, proc, split);
  nn::ViTConfig c = nn::ViTConfig::from_json_file((fs::path(*step_dir) / "config.json").string());
  Booster booster;
  auto model = booster.boost(std::make_shared<nn::ViTForImageClassification>(c)).model;
  load_run_model(booster, *model, *step_dir);  // a LoRA run's adapters merged in
  Trainer trainer(booster, model, nullptr, make_criterion(0));
  trainer.evaluate(*eval_loader(ds, cfg), {std::make_shared<LossHook>(), std::make_shared<AccuracyHook>(nullptr, 0, c.num_labels)});
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.num_labels; ++i) names.push_back(c.label(i));
  if (DistCoordinator().is_master()) print_eval(trainer, names, split);
  return 0;
}

// The run's objects before boost: the loaders, the optimizer and its schedule.
struct RunObjects {
  std::shared_ptr<data::DataLoader> train_loader, val_loader;
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
};

RunObjects make_run_objects(const Config& cfg, Plugin* plugin, std::shared_ptr<const data::Dataset> train_set,
                            std::shared_ptr<const data::Dataset> val_set, nn::Module& model, int lr_replicas) {
  data::DataLoaderOptions lo;
  lo.batch_size = cfg.get_int("train.batch_size");
  lo.shuffle = cfg.get_bool("data.shuffle");
  lo.seed = uint64_t(cfg.get_int("train.seed"));
  lo.drop_last = true;
  lo.num_workers = int(cfg.get_int("data.num_workers"));
  RunObjects o;
  o.train_loader = plugin ? plugin->prepare_dataloader(train_set, lo) : std::make_shared<data::DataLoader>(train_set, lo);
  o.val_loader = eval_loader(std::move(val_set), cfg, plugin);
  // The global batch grows with the data-parallel size (not with tp or pp): so does the lr.
  o.optimizer = examples::make_optimizer(cfg, model, lr_replicas);
  dist::logger().info("optimizer {}", examples::describe_optimizer(*o.optimizer));
  const int64_t k = cfg.get_int("train.gradient_accumulation");
  const int64_t steps_per_epoch = int64_t(o.train_loader->size()) / k;
  BOOSTER_CHECK(steps_per_epoch > 0, "the training split has fewer images than one step (", lo.batch_size, " per rank x ",
                k, " accumulated)");
  o.lr_scheduler = examples::make_lr_scheduler(cfg, *o.optimizer, cfg.get_int("train.epochs") * steps_per_epoch);
  return o;
}

// How the Trainer steps: clipping, accumulation, and Mixup on the training batches.
TrainerOptions trainer_options(const Config& cfg, int64_t num_labels) {
  TrainerOptions to;
  to.clip_grad_norm = cfg.get_float("train.max_norm");
  to.gradient_accumulation = cfg.get_int("train.gradient_accumulation");
  to.return_output_label = false;  // nothing reads the training logits
  auto mixup = std::make_shared<data::Mixup>(
      data::Mixup{cfg.get_float("train.mixup_alpha"), cfg.get_float("train.label_smoothing"), num_labels});
  auto rng = std::make_shared<Generator>(uint64_t(cfg.get_int("train.seed")), 7);
  to.data_process_func = [mixup, rng](data::Batch&& b, Mode mode) {
    if (mode == Mode::train && mixup->alpha > 0) mixup->apply(b, *rng);
    return std::move(b);
  };
  return to;
}

// The hooks of a run: metrics, the schedule, the progress bar's figures, checkpoints, and
// the run's records (metrics.jsonl, TensorBoard, curves).
Hooks run_hooks(const Config& cfg, const Cli& cli, std::shared_ptr<optim::LRScheduler> scheduler,
                std::shared_ptr<examples::MetricsLog> metrics, const fs::path& run_dir, int64_t num_labels,
                SideFiles side_files) {
  SaveCheckpointOptions co;
  co.interval = cfg.get_int("checkpoint.every_steps");
  co.save_by_iter = true;
  co.checkpoint_dir = cfg.get_string("checkpoint.dir").empty() ? (run_dir / "checkpoints").string()
                                                                : cfg.get_string("checkpoint.dir");
  co.lr_scheduler = scheduler;
  co.shard = cfg.get_bool("checkpoint.shard");
  co.keep_last = int(cfg.get_int("checkpoint.keep_last"));
  co.use_async = cfg.get_bool("checkpoint.use_async");
  co.resume = cli.resume;
  co.side_files = std::move(side_files);
  return {std::make_shared<LossHook>(), std::make_shared<AccuracyHook>(nullptr, 0, num_labels),
          std::make_shared<LRSchedulerHook>(scheduler, false), std::make_shared<ThroughputHook>(),
          std::make_shared<LogMetricByStepHook>(), std::make_shared<SaveCheckpointHook>(std::move(co)),
          std::make_shared<examples::RunRecordHook>(metrics, cfg.get_int("train.log_every"),
                                                    cfg.get_int("train.kill_after_steps"))};
}

// The run folder's config.toml (the effective config, so a run can be repeated or mirrored
// by the PyTorch peer: bench/torch_beans_train.py --run) and metrics.jsonl's run record.
void record_run(const Config& cfg, const fs::path& run_dir, examples::MetricsLog& metrics, const Plugin* plugin,
                bool resumed) {
  DistCoordinator coordinator;
  if (!coordinator.is_master()) return;
  std::ofstream(run_dir / "config.toml") << toml::format(cfg.root());
  metrics.write({{"type", "run"}, {"world_size", coordinator.world_size()}, {"threads_per_rank", dist::omp_threads()},
                 {"plugin", plugin ? plugin->name() : "none"}, {"resumed", resumed}});
}

// A plugin whose plan fixes the global batch (Galvatron's global_bsz) sets each data-parallel
// replica's share of it; train.batch_size is that share, said in the log.
void take_plan_batch(Config& cfg, const Plugin* plugin) {
  if (!plugin || plugin->global_batch_size() == 0) return;
  const int64_t global = plugin->global_batch_size(), dp = plugin->dp_size();
  BOOSTER_CHECK(global % dp == 0, "the plan's global batch ", global, " does not divide over ", dp,
                " data-parallel replicas");
  const int64_t was = cfg.get_int("train.batch_size");
  cfg.set("train.batch_size=" + std::to_string(global / dp));
  dist::logger().info("global batch {} from the {} plan: {} images per data-parallel replica ({} replicas; "
                      "train.batch_size was {})", global, plugin->name(), global / dp, dp, was);
}

int train(const Config& cfg_in, const Cli& cli) {
  Config cfg = cfg_in;
  DistCoordinator coordinator;
  const uint64_t seed = uint64_t(cfg.get_int("train.seed"));
  const data::ViTImageProcessor processor = examples::make_processor(cfg);
  const auto [train_set, val_set, labels] = examples::make_splits(cfg, processor);
  manual_seed(seed, 0);  // every rank builds the same initial model
  auto model = examples::make_model(cfg, labels);
  const nn::ViTConfig model_config = model->config();
  manual_seed(seed, uint64_t(coordinator.rank()));

  const fs::path run_dir = fs::path(cfg.get_string("run.output_dir")) / cfg.get_string("run.name");
  set_default_offload_dir((run_dir / "offload").string());  // a disk tier's nameless files, unless offload_dir says
  auto plugin = cfg.has("plugin") ? plugins::make_plugin(cfg) : nullptr;
  take_plan_batch(cfg, plugin.get());
  // "auto" as measured on this CPU, so the run's config.toml says what ran (the peer mirrors it).
  cfg.set("booster.mixed_precision=\"" + resolve_precision(cfg.get_string("booster.mixed_precision")) + "\"");
  Booster booster(plugin, cfg.get_string("booster.mixed_precision"), cfg.get_bool("booster.split_batch"));
  examples::enable_lora_from_config(booster, model, cfg);  // before the optimizer: it takes what trains
  const int dp = plugin ? plugin->dp_size() : coordinator.world_size();
  const int lr_replicas = examples::keep_checkpoint_batch(cfg, dp, cli.resume);  // another dp size: the same global batch
  RunObjects o = make_run_objects(cfg, plugin.get(), train_set, val_set, *model, lr_replicas);
  auto [vit, optimizer, criterion, dataloader, lr_scheduler] = booster.boost(
      model, o.optimizer, make_criterion(cfg.get_float("train.label_smoothing")), o.train_loader, o.lr_scheduler);

  auto metrics = std::make_shared<examples::MetricsLog>(run_dir.string(), !cli.resume.empty(), coordinator.is_master());
  record_run(cfg, run_dir, *metrics, plugin.get(), !cli.resume.empty());
  const std::string data_record = examples::data_record(cfg);
  SideFiles side_files = [&](const std::string& step_dir) -> std::vector<std::string> {
    model_config.save((fs::path(step_dir) / "config.json").string());
    write_file_atomic((fs::path(step_dir) / "data_config.json").string(), data_record);
    if (model_config.num_channels != 3) return {"config.json", "data_config.json"};  // no RGB processor for it
    write_file_atomic((fs::path(step_dir) / "preprocessor_config.json").string(), processor.to_json_string());
    return {"config.json", "data_config.json", "preprocessor_config.json"};
  };
  side_files = examples::with_lora_side_file(std::move(side_files), booster);
  dist::logger().info("{} on {} rank(s) x {} threads, {} train / {} validation images, {} steps per epoch, plugin {}",
                      model_config.architectures[0], coordinator.world_size(), dist::omp_threads(), train_set->size(),
                      val_set->size(), dataloader->size(), plugin ? plugin->name() : "none");
  Trainer trainer(booster, vit, optimizer, criterion, trainer_options(cfg, int64_t(labels.size())));
  trainer.fit({.train_dataloader = dataloader,
               .epochs = cfg.get_int("train.epochs"),
               .test_dataloader = o.val_loader,
               .hooks = run_hooks(cfg, cli, lr_scheduler, metrics, run_dir, int64_t(labels.size()), side_files),
               .display_progress = !cli.no_progress,
               .log_interval = cfg.get_int("train.log_every")});
  examples::save_lora_from_config(booster, *vit, cfg, run_dir);
  coordinator.print_on_master("done: best validation accuracy " + std::to_string(trainer.records()["best_accuracy"]) +
                              ", run folder " + run_dir.string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a Vision Transformer on beans with a booster-cpp plugin"};
  Cli cli;
  app.add_option("--config", cli.config_path, "run config (TOML)");
  app.add_option("--set", cli.overrides, "override a config key: --set train.epochs=3");
  app.add_option("--resume", cli.resume, "continue from a checkpoint folder (a step-N folder or its parent)");
  app.add_flag("--no-progress", cli.no_progress, "plain log lines instead of a progress bar");
  app.add_flag("--eval-only", cli.eval_only, "only evaluate --checkpoint on --split");
  app.add_option("--checkpoint", cli.checkpoint, "checkpoint folder for --eval-only");
  app.add_option("--split", cli.split, "split for --eval-only (default: the validation split of the data the "
                 "checkpoint records)");
  CLI11_PARSE(app, argc, argv);

  Config cfg = cli.config_path.empty() ? Config::from_string("", "<defaults>", cli.overrides)
                                       : Config::from_file(cli.config_path, cli.overrides);
  const bool legacy_parallel = cfg.has("parallel");
  cfg.apply(examples::vit_train_schema());
  examples::map_legacy_model(cfg, legacy_parallel);
  if (legacy_parallel) examples::map_legacy_parallel(cfg);
  dist::launch({uint64_t(cfg.get_int("train.seed"))});
  dist::configure_logging({cfg.get_string("log.level"), cfg.get_bool("log.all_ranks"), ""});
  return cli.eval_only ? eval_only(cfg, cli) : train(cfg, cli);
}
