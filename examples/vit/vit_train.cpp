// vit_train: fine-tune (or train from scratch) a Vision Transformer on beans with any
// plugin — the Booster loop of Colossal-AI's vit_train_demo.py. Swapping plugins is a
// change of config. Launch: mpirun -np N vit_train --config configs/<name>.toml [--set k=v]
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "booster/booster.h"
#include "booster/dist_coordinator.h"
#include "core/dist/collectives.h"
#include "core/dist/logger.h"
#include "core/dist/runtime.h"
#include "core/tensor/offload_store.h"
#include "data/transforms.h"
#include "evaluate.h"
#include "nn/pretrained.h"
#include "optim/adam.h"
#include "plugins/registry.h"
#include "run_checkpoint.h"
#include "run_io.h"
#include "train_config.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

struct Cli {
  std::string config_path, resume, checkpoint, split = "validation";
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

std::string data_root(const Config& cfg) {
  return cfg.get_string("data.root").empty() ? data::BeansDataset::default_root() : cfg.get_string("data.root");
}

data::ImageFolderOptions folder_options(const Config& cfg) {
  data::ImageFolderOptions io;
  io.cache_bytes = size_t(cfg.get_int("data.cache_mb")) << 20;
  io.limit = size_t(cfg.get_int("data.limit"));
  io.max_image_pixels = cfg.get_int("data.max_image_pixels");
  return io;
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

void print_eval(const examples::EvalResult& r, const std::vector<std::string>& names, const std::string& split) {
  std::printf("%s: %lld images, accuracy %.4f, loss %.4f\n", split.c_str(), (long long)r.samples, r.accuracy, r.loss);
  for (size_t i = 0; i < names.size(); ++i) std::printf("  %-20s accuracy %.4f\n", names[i].c_str(), r.per_class_accuracy[i]);
  std::printf("confusion matrix (rows: true, columns: predicted)\n%-20s", "");
  for (auto& n : names) std::printf(" %12.12s", n.c_str());
  std::printf("\n");
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("%-20s", names[i].c_str());
    for (size_t k = 0; k < names.size(); ++k) std::printf(" %12lld", (long long)r.confusion[i][k]);
    std::printf("\n");
  }
}

// --eval-only: scores the newest checkpoint under --checkpoint on --split (whole split).
int eval_only(const Config& cfg, const Cli& cli) {
  BOOSTER_CHECK(!cli.checkpoint.empty(), "--eval-only needs --checkpoint <folder>");
  auto step_dir = examples::latest_checkpoint(cli.checkpoint);
  BOOSTER_CHECK_T(IOError, step_dir.has_value(), "no complete checkpoint under '", cli.checkpoint, "'");
  examples::verify_run_checkpoint(*step_dir);
  auto proc = data::ViTImageProcessor::from_pretrained(*step_dir);
  data::ImageFolderOptions io = folder_options(cfg);
  io.limit = 0;
  auto ds = std::make_shared<data::BeansDataset>(data_root(cfg), cli.split, proc, false, 1, io);
  nn::ViTConfig c = nn::ViTConfig::from_json_file((fs::path(*step_dir) / "config.json").string());
  Booster booster;
  auto model = booster.boost(std::make_shared<nn::ViTForImageClassification>(c)).model;
  const bool shard = fs::is_directory(fs::path(*step_dir) / "model");
  booster.load_model(*model, (fs::path(*step_dir) / (shard ? "model" : "model.ckpt")).string());
  auto r = examples::evaluate(model, *eval_loader(ds, cfg), c.num_labels, booster);
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.num_labels; ++i) names.push_back(c.label(i));
  if (DistCoordinator().is_master()) print_eval(r, names, cli.split);
  return 0;
}

// The model: a preset trained from scratch, or a Hugging Face folder with a new classifier.
std::shared_ptr<nn::ViTForImageClassification> make_model(const Config& cfg, const std::vector<std::string>& labels) {
  const std::string pretrained = cfg.get_string("model.pretrained");
  if (!pretrained.empty()) {
    nn::FromPretrainedOptions fo;
    fo.label_names = labels;
    fo.ignore_mismatched_sizes = true;  // the beans classifier replaces the checkpoint's
    return nn::vit_from_pretrained(pretrained, fo);
  }
  nn::ViTConfig c = nn::ViTConfig::preset(cfg.get_string("model.preset"));
  c.image_size = cfg.get_int("model.image_size");
  if (cfg.get_int("model.patch_size") > 0) c.patch_size = cfg.get_int("model.patch_size");
  c.hidden_dropout_prob = cfg.get_float("model.hidden_dropout_prob");
  c.set_labels(labels);
  return std::make_shared<nn::ViTForImageClassification>(c);
}

// The image processor: the pretrained model's, or the defaults at model.image_size.
data::ViTImageProcessor make_processor(const Config& cfg) {
  const std::string pretrained = cfg.get_string("model.pretrained");
  if (!pretrained.empty()) return data::ViTImageProcessor::from_pretrained(pretrained);
  data::ViTImageProcessor p;
  p.height = p.width = cfg.get_int("model.image_size");
  return p;
}

// The training and validation splits, which must have the same classes.
std::pair<std::shared_ptr<data::BeansDataset>, std::shared_ptr<data::BeansDataset>> make_datasets(
    const Config& cfg, const data::ViTImageProcessor& processor) {
  const auto io = folder_options(cfg);
  auto train_set = std::make_shared<data::BeansDataset>(data_root(cfg), cfg.get_string("data.train_split"), processor,
                                                        cfg.get_bool("data.augment"), 1, io,
                                                        cfg.get_float("data.crop_scale_min"));
  auto val_set = std::make_shared<data::BeansDataset>(data_root(cfg), cfg.get_string("data.val_split"), processor, false,
                                                      1, io);
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return "{" + s + "}";
  };
  BOOSTER_CHECK_T(IOError, val_set->label_names() == train_set->label_names(), "the classes of the '",
                  cfg.get_string("data.val_split"), "' split ", joined(val_set->label_names()),
                  " differ from those of the '", cfg.get_string("data.train_split"), "' split ",
                  joined(train_set->label_names()), " under ", data_root(cfg));
  return {train_set, val_set};
}

// One optimizer step on a batch; returns this rank's share of its loss (undefined on a
// pipeline stage before the last). With a pipeline the stages run the micro-batches, as in
// Colossal-AI's example.
Tensor train_step(Booster& booster, BoostedModel<nn::ViTForImageClassification>& vit, OptimizerWrapper& optimizer,
                  optim::LRScheduler& scheduler, const Criterion& criterion, const Tensor& pixels,
                  const Tensor& targets, double max_norm) {
  Tensor loss;
  if (booster.plugin() && booster.plugin()->support_pipeline()) {
    loss = booster.execute_pipeline(single_batch({{"pixel_values", pixels}, {"labels", targets}}), *vit,
                                    on_keys(criterion, "logits", "labels"), &optimizer, true, false).loss;
  } else {
    loss = criterion(vit(pixels).logits, targets);
    booster.backward(loss, optimizer);
  }
  if (max_norm > 0) optimizer.clip_grad_by_norm(max_norm);
  optimizer.step();
  optimizer.zero_grad();
  scheduler.step();
  return loss;
}

struct EpochMark {
  int64_t epoch, epochs, step;
  double seconds;
};

// An epoch's line in the log, its record in metrics.jsonl and its point on the curves.
void log_epoch(examples::MetricsLog& metrics, const EpochMark& e, double train_loss, const examples::EvalResult& r,
               double best_accuracy) {
  dist::logger().info("epoch {}/{}: train loss {:.4f}, validation loss {:.4f}, accuracy {:.4f} (best {:.4f}), {:.1f} s",
                      e.epoch, e.epochs, train_loss, r.loss, r.accuracy, best_accuracy, e.seconds);
  if (!DistCoordinator().is_master()) return;
  metrics.write({{"type", "epoch"}, {"epoch", e.epoch}, {"step", e.step}, {"train_loss", train_loss}, {"val_loss", r.loss},
                 {"val_accuracy", r.accuracy}, {"val_samples", r.samples}, {"best_accuracy", best_accuracy},
                 {"epoch_seconds", e.seconds}, {"per_class_accuracy", r.per_class_accuracy}});
  metrics.epoch(e.epoch, train_loss, r.loss, r.accuracy);
}

int train(const Config& cfg, const Cli& cli) {
  DistCoordinator coordinator;
  auto& log = dist::logger();
  const uint64_t seed = uint64_t(cfg.get_int("train.seed"));

  // ---- data and model ----
  const data::ViTImageProcessor processor = make_processor(cfg);
  const auto [train_set, val_set] = make_datasets(cfg, processor);
  const auto labels = train_set->label_names();
  manual_seed(seed, 0);  // every rank builds the same initial model
  auto model = make_model(cfg, labels);
  const nn::ViTConfig model_config = model->config();
  manual_seed(seed, uint64_t(coordinator.rank()));

  // ---- plugin, booster, the five objects ----
  const fs::path run_dir = fs::path(cfg.get_string("run.output_dir")) / cfg.get_string("run.name");
  set_default_offload_dir((run_dir / "offload").string());  // a disk tier's nameless files, unless offload_dir says
  auto plugin = cfg.has("plugin") ? plugins::make_plugin(cfg) : nullptr;
  Booster booster(plugin, cfg.get_string("booster.mixed_precision"), cfg.get_bool("booster.split_batch"));
  data::DataLoaderOptions lo;
  lo.batch_size = cfg.get_int("train.batch_size");
  lo.shuffle = cfg.get_bool("data.shuffle");
  lo.seed = seed;
  lo.drop_last = true;
  lo.num_workers = int(cfg.get_int("data.num_workers"));
  auto train_loader = plugin ? plugin->prepare_dataloader(train_set, lo) : std::make_shared<data::DataLoader>(train_set, lo);
  auto val_loader = eval_loader(val_set, cfg, plugin.get());
  // The global batch grows with the data-parallel size (not with tp or pp): so does the lr.
  const int dp = plugin ? plugin->dp_size() : coordinator.world_size();
  optim::AdamOptions ao;
  ao.lr = cfg.get_float("train.lr") * dp;
  auto optimizer = std::make_shared<optim::HybridAdam>(
      optim::param_groups_no_decay(model->named_parameters(), cfg.get_float("train.weight_decay")), ao);
  const int64_t epochs = cfg.get_int("train.epochs"), steps_per_epoch = int64_t(train_loader->size());
  BOOSTER_CHECK(steps_per_epoch > 0, "the training split has fewer images than one batch (", lo.batch_size, " per rank)");
  const int64_t total_steps = epochs * steps_per_epoch;
  auto lr_scheduler = std::make_shared<optim::CosineAnnealingWarmupLR>(
      *optimizer, total_steps, int64_t(double(total_steps) * cfg.get_float("train.warmup_ratio")));
  auto [vit, optim_w, criterion, dataloader, scheduler] =
      booster.boost(model, optimizer, make_criterion(cfg.get_float("train.label_smoothing")), train_loader, lr_scheduler);

  // ---- run folder, resume ----
  const std::string ckpt_dir = cfg.get_string("checkpoint.dir").empty() ? (run_dir / "checkpoints").string()
                                                                        : cfg.get_string("checkpoint.dir");
  examples::RunState state{vit.wrapper().get(), optim_w.get(), scheduler.get(), &model_config, &processor};
  int64_t start_epoch = 0, step = 0, skip_batches = 0;
  double best_accuracy = 0;
  if (!cli.resume.empty()) {
    auto step_dir = examples::latest_checkpoint(cli.resume);
    BOOSTER_CHECK_T(IOError, step_dir.has_value(), "--resume: no complete checkpoint under '", cli.resume, "'");
    if (coordinator.is_master()) examples::remove_partial_checkpoints(cli.resume);
    auto p = examples::load_run_checkpoint(booster, state, *step_dir);
    start_epoch = p.epoch(), step = p.step(), skip_batches = p.sampler_position();
    if (p.metrics().count("best_accuracy")) best_accuracy = p.metrics().at("best_accuracy");
    log.info("resumed from {} at epoch {}, step {}", *step_dir, start_epoch, step);
  }
  examples::MetricsLog metrics(run_dir.string(), !cli.resume.empty(), coordinator.is_master());
  if (coordinator.is_master()) {
    // The effective config (defaults filled, --set applied) and the launch shape, so a run
    // can be repeated, or mirrored by the PyTorch peer (bench/torch_beans_train.py --run).
    std::ofstream(run_dir / "config.toml") << toml::format(cfg.root());
    metrics.write({{"type", "run"}, {"world_size", coordinator.world_size()}, {"threads_per_rank", dist::omp_threads()},
                   {"plugin", plugin ? plugin->name() : "none"}, {"resumed", !cli.resume.empty()}});
  }
  data::Mixup mixup{cfg.get_float("train.mixup_alpha"), cfg.get_float("train.label_smoothing"), int64_t(labels.size())};
  Generator mix_rng(seed, 7);
  const double max_norm = cfg.get_float("train.max_norm");
  auto checkpoint_now = [&](int64_t epoch, int64_t position) {
    proto::TrainingProgress p;
    p.set_epoch(epoch);
    p.set_step(step);
    p.set_sampler_position(position);
    (*p.mutable_metrics())["best_accuracy"] = best_accuracy;
    log.info("checkpoint saved: {}", examples::save_run_checkpoint(booster, state, ckpt_dir, cfg.get_bool("checkpoint.shard"),
                                                                   int(cfg.get_int("checkpoint.keep_last")), p));
  };
  log.info("{} on {} rank(s) x {} threads, {} train / {} validation images, {} steps per epoch, plugin {}",
           model_config.architectures[0], coordinator.world_size(), dist::omp_threads(), train_set->size(),
           val_set->size(), steps_per_epoch, plugin ? plugin->name() : "none");

  // ---- train ----
  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    dataloader->set_epoch(epoch);
    dataloader->set_start_batch(size_t(skip_batches));
    examples::ProgressBar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), steps_per_epoch,
                              coordinator.is_master() && !cli.no_progress && isatty(STDERR_FILENO),
                              cfg.get_int("train.log_every"));
    const auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0, logged_loss = 0;
    int64_t loss_count = 0;
    vit->train();
    while (auto batch = dataloader->next()) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor pixels = batch->pixel_values, targets = batch->labels;
      if (mixup.alpha > 0) std::tie(pixels, targets, std::ignore) = mixup(pixels, targets, mix_rng);
      const Tensor loss = train_step(booster, vit, *optim_w, *scheduler, criterion, pixels, targets, max_norm);
      ++step;
      if (loss.defined()) loss_sum += loss.item(), ++loss_count;
      const int64_t position = int64_t(dataloader->position()), log_every = cfg.get_int("train.log_every");
      // What is logged is the global batch's mean under every plugin (one all-reduce a logged step).
      const bool logged = step % log_every == 0 || position % log_every == 0 || position == steps_per_epoch;
      if (logged) logged_loss = booster.mean_loss(loss);
      const double ips = double(batch->labels.size(0) * dp) /
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      bar.update(position, logged_loss, scheduler->get_last_lr()[0], ips);
      if (coordinator.is_master() && step % log_every == 0)
        metrics.write({{"type", "step"}, {"epoch", epoch}, {"step", step}, {"loss", logged_loss},
                       {"lr", scheduler->get_last_lr()[0]}, {"images_per_s", ips}});
      const int64_t every = cfg.get_int("checkpoint.every_steps");
      if (every > 0 && step % every == 0 && step < total_steps)  // the run's last step is saved once, below
        checkpoint_now(epoch, int64_t(dataloader->position()));
      examples::kill_for_testing(step, cfg.get_int("train.kill_after_steps"));
    }
    bar.finish();
    skip_batches = 0;
    const double epoch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    auto r = examples::evaluate(vit, *val_loader, int64_t(labels.size()), booster);
    best_accuracy = std::max(best_accuracy, r.accuracy);
    // The epoch's mean over the ranks that held losses (each held as many).
    const double train_loss = dist::mean_where_held(loss_count ? std::optional(loss_sum / double(loss_count)) : std::nullopt);
    log_epoch(metrics, {epoch + 1, epochs, step, epoch_s}, train_loss, r, best_accuracy);
  }
  checkpoint_now(epochs, 0);
  coordinator.print_on_master("done: best validation accuracy " + std::to_string(best_accuracy) + ", run folder " +
                              run_dir.string());
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
  app.add_option("--split", cli.split, "split folder of the data root for --eval-only");
  CLI11_PARSE(app, argc, argv);

  Config cfg = cli.config_path.empty() ? Config::from_string("", "<defaults>", cli.overrides)
                                       : Config::from_file(cli.config_path, cli.overrides);
  cfg.apply(examples::vit_train_schema());
  dist::launch_from_openmpi({uint64_t(cfg.get_int("train.seed"))});
  dist::configure_logging({cfg.get_string("log.level"), cfg.get_bool("log.all_ranks"), ""});
  return cli.eval_only ? eval_only(cfg, cli) : train(cfg, cli);
}
