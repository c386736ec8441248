// vit_train: fine-tune (or train from scratch) a Vision Transformer on beans with any
// plugin — the Booster loop of Colossal-AI's vit_train_demo.py. Swapping plugins is a
// change of config. Launch: mpirun -np N vit_train --config configs/<name>.toml [--set k=v]
#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "booster/booster.h"
#include "booster/dist_coordinator.h"
#include "core/comm/collectives.h"
#include "core/comm/logger.h"
#include "core/comm/runtime.h"
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

// The loss of the example: cross entropy on hard labels, or on Mixup's soft targets.
Criterion make_criterion(double label_smoothing) {
  return [label_smoothing](const Tensor& logits, const Tensor& labels) {
    if (labels.dtype() == DType::i64) return cross_entropy(logits, labels, {-100, label_smoothing});
    return cross_entropy_soft(logits, labels, label_smoothing);
  };
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a Vision Transformer on beans with a booster-cpp plugin"};
  std::string config_path, resume, checkpoint, split = "validation";
  std::vector<std::string> overrides;
  bool no_progress = false, eval_only = false;
  app.add_option("--config", config_path, "run config (TOML)");
  app.add_option("--set", overrides, "override a config key: --set train.epochs=3");
  app.add_option("--resume", resume, "continue from a checkpoint folder (a step-N folder or its parent)");
  app.add_flag("--no-progress", no_progress, "plain log lines instead of a progress bar");
  app.add_flag("--eval-only", eval_only, "only evaluate --checkpoint on --split");
  app.add_option("--checkpoint", checkpoint, "checkpoint folder for --eval-only");
  app.add_option("--split", split, "split folder of the data root for --eval-only");
  CLI11_PARSE(app, argc, argv);

  Config cfg = config_path.empty() ? Config::from_string("", "<defaults>", overrides)
                                   : Config::from_file(config_path, overrides);
  cfg.apply(examples::vit_train_schema());
  dist::launch_from_openmpi({uint64_t(cfg.get_int("train.seed"))});
  dist::configure_logging({cfg.get_string("log.level"), cfg.get_bool("log.all_ranks"), ""});
  DistCoordinator coordinator;
  auto& log = dist::logger();

  // ---- data ----
  const std::string root = cfg.get_string("data.root").empty() ? data::BeansDataset::default_root()
                                                               : cfg.get_string("data.root");
  const std::string pretrained = cfg.get_string("model.pretrained");
  data::ViTImageProcessor processor = pretrained.empty() ? data::ViTImageProcessor{}
                                                         : data::ViTImageProcessor::from_pretrained(pretrained);
  if (pretrained.empty()) processor.height = processor.width = cfg.get_int("model.image_size");
  data::ImageFolderOptions io;
  io.cache_bytes = size_t(cfg.get_int("data.cache_mb")) << 20;
  io.limit = size_t(cfg.get_int("data.limit"));

  // ---- model ----
  auto make_model = [&](const std::vector<std::string>& labels) {
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
  };

  if (eval_only) {
    BOOSTER_CHECK(!checkpoint.empty(), "--eval-only needs --checkpoint <folder>");
    auto step_dir = examples::latest_checkpoint(checkpoint);
    BOOSTER_CHECK_T(IOError, step_dir.has_value(), "no complete checkpoint under '", checkpoint, "'");
    auto proc = data::ViTImageProcessor::from_pretrained(*step_dir);
    data::ImageFolderOptions eval_io = io;
    eval_io.limit = 0;  // --eval-only scores the whole split
    auto ds = std::make_shared<data::BeansDataset>(root, split, proc, false, 1, eval_io);
    nn::ViTConfig c = nn::ViTConfig::from_json_file((fs::path(*step_dir) / "config.json").string());
    auto model = std::make_shared<nn::ViTForImageClassification>(c);
    Booster booster;
    auto b = booster.boost(model);
    const bool shard = fs::is_directory(fs::path(*step_dir) / "model");
    booster.load_model(*b.model, (fs::path(*step_dir) / (shard ? "model" : "model.ckpt")).string());
    data::DataLoaderOptions lo;
    lo.batch_size = cfg.get_int("train.batch_size");
    lo.num_workers = int(cfg.get_int("data.num_workers"));
    data::DataLoader loader(ds, lo, std::make_shared<data::InferenceShardSampler>(ds->size(), coordinator.world_size(),
                                                                                   coordinator.rank()));
    auto r = examples::evaluate(*b.model, loader, c.num_labels);
    std::vector<std::string> names;
    for (int64_t i = 0; i < c.num_labels; ++i) names.push_back(c.label(i));
    if (coordinator.is_master()) print_eval(r, names, split);
    return 0;
  }

  auto train_set = std::make_shared<data::BeansDataset>(root, cfg.get_string("data.train_split"), processor,
                                                        cfg.get_bool("data.augment"), 1, io,
                                                        cfg.get_float("data.crop_scale_min"));
  auto val_set = std::make_shared<data::BeansDataset>(root, cfg.get_string("data.val_split"), processor, false, 1, io);
  const auto labels = train_set->label_names();
  std::shared_ptr<const data::Dataset> train_data = train_set, val_data = val_set;
  manual_seed(uint64_t(cfg.get_int("train.seed")), 0);  // every rank builds the same initial model
  auto model = make_model(labels);
  const nn::ViTConfig model_config = model->config();
  manual_seed(uint64_t(cfg.get_int("train.seed")), uint64_t(coordinator.rank()));

  // ---- plugin, booster, the five objects ----
  auto plugin = cfg.has("plugin") ? plugins::make_plugin(cfg) : nullptr;
  Booster booster(plugin, cfg.get_string("booster.mixed_precision"));
  const int64_t batch_size = cfg.get_int("train.batch_size");
  DataLoaderArgs la{batch_size, cfg.get_bool("data.shuffle"), uint64_t(cfg.get_int("train.seed")), true,
                    int(cfg.get_int("data.num_workers"))};
  std::shared_ptr<data::DataLoader> train_loader;
  if (plugin) {
    train_loader = plugin->prepare_dataloader(train_data, la);
  } else {
    train_loader = std::make_shared<data::DataLoader>(
        train_data, data::DataLoaderOptions{la.batch_size, la.shuffle, la.drop_last, la.num_workers, la.seed, 2});
  }
  data::DataLoaderOptions vo;
  vo.batch_size = batch_size;
  vo.num_workers = la.num_workers;
  data::DataLoader val_loader(val_data, vo,
                              std::make_shared<data::InferenceShardSampler>(val_data->size(), coordinator.world_size(),
                                                                            coordinator.rank()));
  optim::AdamOptions ao;
  ao.lr = cfg.get_float("train.lr") * coordinator.world_size();
  auto optimizer = std::make_shared<optim::HybridAdam>(
      optim::param_groups_no_decay(model->named_parameters(), cfg.get_float("train.weight_decay")), ao);
  const int64_t epochs = cfg.get_int("train.epochs"), steps_per_epoch = int64_t(train_loader->size());
  BOOSTER_CHECK(steps_per_epoch > 0, "the training split has fewer images than one batch (", batch_size, " per rank)");
  const int64_t total_steps = epochs * steps_per_epoch;
  auto lr_scheduler = std::make_shared<optim::CosineAnnealingWarmupLR>(
      *optimizer, total_steps, int64_t(double(total_steps) * cfg.get_float("train.warmup_ratio")));
  auto [vit, optim_w, criterion, dataloader, scheduler] =
      booster.boost(model, optimizer, make_criterion(cfg.get_float("train.label_smoothing")), train_loader, lr_scheduler);

  // ---- run folder, resume ----
  const fs::path run_dir = fs::path(cfg.get_string("run.output_dir")) / cfg.get_string("run.name");
  const std::string ckpt_dir = cfg.get_string("checkpoint.dir").empty() ? (run_dir / "checkpoints").string()
                                                                        : cfg.get_string("checkpoint.dir");
  examples::RunState state{vit.get(), optim_w.get(), scheduler.get(), &model_config, &processor};
  int64_t start_epoch = 0, step = 0, skip_batches = 0;
  double best_accuracy = 0;
  if (!resume.empty()) {
    auto step_dir = examples::latest_checkpoint(resume);
    BOOSTER_CHECK_T(IOError, step_dir.has_value(), "--resume: no complete checkpoint under '", resume, "'");
    auto p = examples::load_run_checkpoint(booster, state, *step_dir);
    start_epoch = p.epoch(), step = p.step(), skip_batches = p.sampler_position();
    if (p.metrics().count("best_accuracy")) best_accuracy = p.metrics().at("best_accuracy");
    log.info("resumed from {} at epoch {}, step {}", *step_dir, start_epoch, step);
  }
  examples::MetricsLog metrics(run_dir.string(), !resume.empty(), coordinator.is_master());
  if (coordinator.is_master()) {
    // The effective config (defaults filled, --set applied) and the launch shape, so a run
    // can be repeated, or mirrored by the PyTorch peer (bench/torch_beans_train.py --run).
    std::ofstream(run_dir / "config.toml") << toml::format(cfg.root());
    metrics.write({{"type", "run"}, {"world_size", coordinator.world_size()}, {"threads_per_rank", dist::omp_threads()},
                   {"plugin", plugin ? plugin->name() : "none"}, {"resumed", !resume.empty()}});
  }
  data::Mixup mixup{cfg.get_float("train.mixup_alpha"), cfg.get_float("train.label_smoothing"), int64_t(labels.size())};
  Generator mix_rng(uint64_t(cfg.get_int("train.seed")), 7);
  const double max_norm = cfg.get_float("train.max_norm");
  const int64_t kill_after = cfg.get_int("train.kill_after_steps");
  auto checkpoint_now = [&](int64_t epoch, int64_t position) {
    proto::TrainingProgress p;
    p.set_epoch(epoch);
    p.set_step(step);
    p.set_sampler_position(position);
    (*p.mutable_metrics())["best_accuracy"] = best_accuracy;
    const auto d = examples::save_run_checkpoint(booster, state, ckpt_dir, cfg.get_bool("checkpoint.shard"),
                                                 int(cfg.get_int("checkpoint.keep_last")), p);
    log.info("checkpoint saved: {}", d);
  };
  log.info("{} on {} rank(s) x {} threads, {} train / {} validation images, {} steps per epoch, plugin {}",
           model_config.architectures[0], coordinator.world_size(), dist::omp_threads(), train_data->size(),
           val_data->size(), steps_per_epoch, plugin ? plugin->name() : "none");

  // ---- train ----
  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    dataloader->set_epoch(epoch);
    dataloader->set_start_batch(size_t(skip_batches));
    examples::ProgressBar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), steps_per_epoch,
                              coordinator.is_master() && !no_progress && isatty(STDERR_FILENO),
                              cfg.get_int("train.log_every"));
    const auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t loss_count = 0;
    vit->train();
    while (auto batch = dataloader->next()) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor pixels = batch->pixel_values, targets = batch->labels;
      if (mixup.alpha > 0) std::tie(pixels, targets, std::ignore) = mixup(pixels, targets, mix_rng);
      auto outputs = (*vit)(pixels);
      Tensor loss = criterion(outputs.logits, targets);
      booster.backward(loss, *optim_w);
      if (max_norm > 0) optim_w->clip_grad_by_norm(max_norm);
      optim_w->step();
      optim_w->zero_grad();
      scheduler->step();
      ++step;
      loss_sum += loss.item();
      ++loss_count;
      const double ips = double(batch->labels.size(0) * coordinator.world_size()) /
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      bar.update(int64_t(dataloader->position()), loss.item(), scheduler->get_last_lr()[0], ips);
      if (coordinator.is_master() && step % cfg.get_int("train.log_every") == 0)
        metrics.write({{"type", "step"}, {"epoch", epoch}, {"step", step}, {"loss", loss.item()},
                       {"lr", scheduler->get_last_lr()[0]}, {"images_per_s", ips}});
      const int64_t every = cfg.get_int("checkpoint.every_steps");
      if (every > 0 && step % every == 0) checkpoint_now(epoch, int64_t(dataloader->position()));
      if (kill_after > 0 && step == kill_after) std::raise(SIGKILL);  // testing: die without cleanup
    }
    bar.finish();
    skip_batches = 0;
    const double epoch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    auto r = examples::evaluate(*vit, val_loader, int64_t(labels.size()));
    best_accuracy = std::max(best_accuracy, r.accuracy);
    const double train_loss = dist::all_reduce_scalar(loss_count ? loss_sum / double(loss_count) : 0.0, dist::ReduceOp::avg);
    log.info("epoch {}/{}: train loss {:.4f}, validation loss {:.4f}, accuracy {:.4f} (best {:.4f}), {:.1f} s", epoch + 1,
             epochs, train_loss, r.loss, r.accuracy, best_accuracy, epoch_s);
    if (coordinator.is_master()) {
      metrics.write({{"type", "epoch"}, {"epoch", epoch + 1}, {"train_loss", train_loss}, {"val_loss", r.loss},
                     {"val_accuracy", r.accuracy}, {"best_accuracy", best_accuracy}, {"epoch_seconds", epoch_s},
                     {"per_class_accuracy", r.per_class_accuracy}});
      metrics.epoch(epoch + 1, train_loss, r.loss, r.accuracy);
    }
  }
  checkpoint_now(epochs, 0);
  coordinator.print_on_master("done: best validation accuracy " + std::to_string(best_accuracy) + ", run folder " +
                              run_dir.string());
  return 0;
}
