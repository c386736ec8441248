// vit_train's config schema (see train_config.h). Defaults follow Colossal-AI's ViT
// example where it has one (lr 3e-4 x world size, warm-up ratio 0.3, weight decay 0.1,
// seed 42, drop_last and shuffle on).
#include "train_config.h"

#include <cmath>

#include "data/image.h"
#include "lora_setup.h"

namespace booster::examples {

namespace {

// [model]: the preset, Hugging Face's widths, legacy Colossal-AI's globals, lazy init, checkpointing.
void add_model_keys(ConfigSchema& s) {
  using T = ConfigType;
  s.add("model.preset", T::string, "vit-tiny", "vit-tiny, vit-small, vit-base, vit-large, vit-huge, vit-giant")
      .add("model.pretrained", T::string, "", "Hugging Face model folder (config.json + model.safetensors)")
      .add("model.image_size", T::integer, 224)
      .add("model.patch_size", T::integer, 0, "0: the preset's (16; 14 for vit-huge)")
      .add("model.hidden_dropout_prob", T::floating, 0.0)
      .add("model.hidden_size", T::integer, 0, "Hugging Face's ViTConfig widths; 0: the preset's")
      .add("model.num_hidden_layers", T::integer, 0, "0: the preset's")
      .add("model.num_attention_heads", T::integer, 0, "0: the preset's")
      .add("model.intermediate_size", T::integer, 0, "0: the preset's (4 x hidden_size)")
      .add("model.num_chunks", T::integer, 1, "legacy Colossal-AI's model = dict(num_chunks=V): with [parallel] "
           "pipeline > 1, V > 1 selects the interleaved schedule of V chunks a stage")
      .add("HIDDEN_SIZE", T::integer, 0, "legacy Colossal-AI's config globals: model.hidden_size")
      .add("DEPTH", T::integer, 0, "legacy: model.num_hidden_layers")
      .add("NUM_HEADS", T::integer, 0, "legacy: model.num_attention_heads")
      .add("MLP_RATIO", T::floating, 0.0, "legacy: model.intermediate_size = MLP_RATIO x the hidden size")
      .add("model.lazy_init", T::boolean, false,
           "build under nn::LazyInit: each rank materializes only what its plugin keeps, at boost")
      .add("model.gradient_checkpointing", T::boolean, false, "recompute each layer's forward in backward")
      .add("model.gradient_checkpointing_ratio", T::floating, 1.0, "share of each stage's layers checkpointed");
}

// [data]: the dataset, its augmentation and its loader.
void add_data_keys(ConfigSchema& s) {
  using T = ConfigType;
  s.add("data.dataset", T::string, "beans", "beans (an image folder) or fashion_mnist (IDX files)")
      .add("data.root", T::string, "", "dataset root (beans: <split>/<class>/<image>); empty: the shared beans, "
           "or Debian's dataset-fashion-mnist")
      .add("data.train_split", T::string, "train")
      .add("data.val_split", T::string, "validation")
      .add("data.num_workers", T::integer, 1)
      .add("data.augment", T::boolean, true, "RandomResizedCrop + RandomHorizontalFlip")
      .add("data.crop_scale_min", T::floating, 0.08, "RandomResizedCrop's smallest area fraction")
      .add("data.shuffle", T::boolean, true)
      .add("data.cache_mb", T::integer, 2048, "decoded-image cache per dataset")
      .add("data.limit", T::integer, 0, "use only N images of each split, spread over it (0: all)")
      .add("data.max_image_pixels", T::integer, data::kMaxImagePixels,
           "larger images are refused from their header, as Pillow's decompression-bomb check (0: no limit)");
}

// [train]: the loop, the optimizer and its schedule.
void add_train_keys(ConfigSchema& s) {
  using T = ConfigType;
  s.add("train.epochs", T::integer, 10)
      .add("train.batch_size", T::integer, 32, "per rank")
      .add("train.lr", T::floating, 3e-4, "multiplied by the data-parallel size, as Colossal-AI's example")
      .add("train.lr_scaling", T::string, "dp", "dp (lr times the data-parallel size) or none (lr as given)")
      .add("train.optimizer", T::string, "hybrid_adam", "hybrid_adam, adamw, lamb or lars")
      .add("train.betas", T::floating_list, toml::array{0.9, 0.999}, "hybrid_adam, adamw, lamb: (beta1, beta2)")
      .add("train.eps", T::floating, 0.0, "hybrid_adam, adamw, lamb: 0 keeps the optimizer's (Adam 1e-8, Lamb 1e-6)")
      .add("train.bias_correction", T::boolean, false, "lamb: Adam's bias correction of its moments (Adam always)")
      .add("train.exclude_from_layer_adaptation", T::boolean, false,
           "lamb: biases and norms (no weight decay) also take trust 1 (LARS always excludes them)")
      .add("train.momentum", T::floating, 0.9, "lars")
      .add("train.lars_eeta", T::floating, 1e-3, "lars: the trust coefficient")
      .add("train.lr_scheduler", T::string, "cosine_warmup", "cosine_warmup or linear_warmup, per optimizer step")
      .add("train.warmup_ratio", T::floating, 0.3)
      .add("train.weight_decay", T::floating, 0.1)
      .add("train.label_smoothing", T::floating, 0.0)
      .add("train.mixup_alpha", T::floating, 0.0, "0: no Mixup")
      .add("train.max_norm", T::floating, 0.0, "gradient clipping by global norm (0: off)")
      .add("train.gradient_accumulation", T::integer, 1, "batches a step accumulates (the first K-1 under no_sync)")
      .add("train.seed", T::integer, 42)
      .add("train.log_every", T::integer, 10)
      .add("train.kill_after_steps", T::integer, 0, "testing: SIGKILL this process after N steps");
}

// [booster], [checkpoint], [run], [log] and legacy [parallel].
void add_run_keys(ConfigSchema& s) {
  using T = ConfigType;
  s.add("booster.mixed_precision", T::string, "fp32", "fp32, bf16, fp16 or auto (bf16 where this CPU runs it faster; plugins that own precision ignore it)")
      .add("booster.split_batch", T::boolean, false,
           "each thread runs its own share of the batch (no plugin, torch_ddp, low_level_zero)")
      .add("checkpoint.dir", T::string, "", "empty: <run.output_dir>/<run.name>/checkpoints")
      .add("checkpoint.every_steps", T::integer, 0, "0: only at the end")
      .add("checkpoint.keep_last", T::integer, 2)
      .add("checkpoint.shard", T::boolean, true)
      .add("checkpoint.use_async", T::boolean, false, "written behind training (Booster's use_async)")
      .add("run.name", T::string, "vit_beans")
      .add("run.output_dir", T::string, "runs")
      .add("log.level", T::string, "info")
      .add("log.all_ranks", T::boolean, false)
      .add("parallel.pipeline", T::integer, 1, "legacy Colossal-AI: pipeline stages (mapped onto [plugin])")
      .add("parallel.num_micro_batches", T::integer, 0, "legacy: micro-batches a step (0: the pipeline size)")
      .add("parallel.tensor.mode", T::string, "1d", "legacy: 1d, 2d, 2.5d or 3d")
      .add("parallel.tensor.size", T::integer, 1, "legacy: tensor-parallel size")
      .add("parallel.tensor.depth", T::integer, 1, "legacy: 2.5d's depth");
}

// Numbers outside these ranges are refused by name, with the value and where it was set.
void add_ranges(ConfigSchema& s) {
  for (const char* k : {"model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads",
                        "model.intermediate_size", "HIDDEN_SIZE", "DEPTH", "NUM_HEADS", "MLP_RATIO"})
    s.range(k, 0);
  s.range("model.num_chunks", 1);
  for (const char* k : {"data.num_workers", "data.cache_mb", "data.limit", "data.max_image_pixels", "train.lr", "train.momentum",
                        "train.weight_decay", "train.eps", "train.mixup_alpha", "train.max_norm", "train.kill_after_steps",
                        "checkpoint.every_steps", "model.patch_size"})
    s.range(k, 0);
  for (const char* k : {"parallel.pipeline", "parallel.tensor.size", "parallel.tensor.depth"}) s.range(k, 1);
  s.range("parallel.num_micro_batches", 0);
  for (const char* k : {"model.image_size", "train.epochs", "train.batch_size", "train.log_every", "checkpoint.keep_last",
                        "train.gradient_accumulation"})
    s.range(k, 1);
  for (const char* k : {"data.crop_scale_min", "train.warmup_ratio", "model.hidden_dropout_prob", "train.label_smoothing",
                        "model.gradient_checkpointing_ratio"})
    s.range(k, 0, 1);
}

}  // namespace

ConfigSchema vit_train_schema() {
  ConfigSchema s;
  add_model_keys(s);
  add_data_keys(s);
  add_train_keys(s);
  add_run_keys(s);
  s.open_table("plugin");
  add_ranges(s);
  add_lora_schema(s);
  return s;
}

void map_legacy_parallel(Config& cfg) {
  BOOSTER_CHECK(!cfg.has("plugin"), cfg.where("parallel.pipeline"), ": [parallel] (legacy Colossal-AI's table) and "
                "[plugin] both say how to parallelize; give one of them");
  const int64_t pp = cfg.get_int("parallel.pipeline"), mb = cfg.get_int("parallel.num_micro_batches");
  cfg.set("plugin.name=\"hybrid_parallel\"");
  cfg.set("plugin.tp_size=" + std::to_string(cfg.get_int("parallel.tensor.size")));
  cfg.set("plugin.tp_mode=\"" + cfg.get_string("parallel.tensor.mode") + "\"");
  cfg.set("plugin.tp_depth=" + std::to_string(cfg.get_int("parallel.tensor.depth")));
  cfg.set("plugin.pp_size=" + std::to_string(pp));
  if (pp > 1) cfg.set("plugin.num_microbatches=" + std::to_string(mb > 0 ? mb : pp));
  if (const int64_t v = cfg.get_int("model.num_chunks"); v > 1) {  // legacy: num_chunks selects the interleaved schedule
    BOOSTER_CHECK(pp > 1, cfg.where("model.num_chunks"), ": model.num_chunks = ", v, " needs [parallel] pipeline > 1");
    cfg.set("plugin.pp_style=\"interleaved\"");
    cfg.set("plugin.num_model_chunks=" + std::to_string(v));
  }
  cfg.set("plugin.precision=\"" + cfg.get_string("booster.mixed_precision") + "\"");
}

void map_legacy_model(Config& cfg, bool legacy_parallel) {
  BOOSTER_CHECK(cfg.get_int("model.num_chunks") == 1 || legacy_parallel, cfg.where("model.num_chunks"),
                ": model.num_chunks is legacy Colossal-AI's, read with a [parallel] table; with [plugin] set "
                "plugin.pp_style = \"interleaved\" and plugin.num_model_chunks");
  auto take = [&](const char* legacy, const char* key) {
    const int64_t v = cfg.get_int(legacy);
    if (v == 0) return;
    BOOSTER_CHECK(cfg.get_int(key) == 0 || cfg.get_int(key) == v, cfg.where(legacy), ": ", legacy, " = ", v,
                  " and ", key, " = ", cfg.get_int(key), " disagree");
    cfg.set(std::string(key) + "=" + std::to_string(v));
  };
  take("HIDDEN_SIZE", "model.hidden_size");
  take("DEPTH", "model.num_hidden_layers");
  take("NUM_HEADS", "model.num_attention_heads");
  if (const double r = cfg.get_float("MLP_RATIO"); r > 0) {
    const int64_t h = cfg.get_int("model.hidden_size");
    BOOSTER_CHECK(h > 0, cfg.where("MLP_RATIO"), ": MLP_RATIO needs HIDDEN_SIZE (or model.hidden_size)");
    cfg.set("model.intermediate_size=" + std::to_string(int64_t(std::llround(r * double(h)))));
  }
  if (cfg.get_string("model.pretrained").empty()) return;
  for (const char* k : {"model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads", "model.intermediate_size"})
    BOOSTER_CHECK(cfg.get_int(k) == 0, cfg.where(k), ": ", k, " with model.pretrained: the folder's config.json gives "
                  "the widths");
}

}  // namespace booster::examples
