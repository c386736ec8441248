// vit_train's objects from its config (see run_setup.h).
#include "run_setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "booster/trainer/data_layout.h"
#include "core/common/file_util.h"
#include "core/dist/logger.h"
#include "data/idx.h"
#include "nn/lazy.h"
#include "nn/lora.h"
#include "nn/pretrained.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "plugins/registry.h"

namespace booster::examples {

namespace fs = std::filesystem;

namespace {

bool fashion_mnist(const Config& cfg) {
  const std::string d = cfg.get_string("data.dataset");
  BOOSTER_CHECK(d == "beans" || d == "fashion_mnist", "data.dataset = '", d, "': expected \"beans\" or \"fashion_mnist\"");
  return d == "fashion_mnist";
}

std::string data_root(const Config& cfg) {
  if (!cfg.get_string("data.root").empty()) return cfg.get_string("data.root");
  return fashion_mnist(cfg) ? data::FashionMNIST::default_root() : data::BeansDataset::default_root();
}

data::ImageFolderOptions folder_options(const Config& cfg) {
  data::ImageFolderOptions io;
  io.cache_bytes = size_t(cfg.get_int("data.cache_mb")) << 20;
  io.limit = size_t(cfg.get_int("data.limit"));
  io.max_image_pixels = cfg.get_int("data.max_image_pixels");
  return io;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return "{" + s + "}";
}

Splits beans_splits(const Config& cfg, const data::ViTImageProcessor& processor) {
  const auto io = folder_options(cfg);
  auto train = std::make_shared<data::BeansDataset>(data_root(cfg), cfg.get_string("data.train_split"), processor,
                                                    cfg.get_bool("data.augment"), 1, io, cfg.get_float("data.crop_scale_min"));
  auto val = std::make_shared<data::BeansDataset>(data_root(cfg), cfg.get_string("data.val_split"), processor, false, 1, io);
  BOOSTER_CHECK_T(IOError, val->label_names() == train->label_names(), "the classes of the '",
                  cfg.get_string("data.val_split"), "' split ", joined(val->label_names()), " differ from those of the '",
                  cfg.get_string("data.train_split"), "' split ", joined(train->label_names()), " under ", data_root(cfg));
  return {train, val, train->label_names()};
}

}  // namespace

std::string data_record(const Config& cfg) {
  const bool fm = fashion_mnist(cfg);
  nlohmann::json j{{"dataset", cfg.get_string("data.dataset")},
                   {"root", fs::absolute(data_root(cfg)).string()},
                   {"train_split", fm ? "train" : cfg.get_string("data.train_split")},
                   {"val_split", fm ? "test" : cfg.get_string("data.val_split")},
                   {"limit", cfg.get_int("data.limit")}};
  return j.dump(1) + "\n";
}

std::string apply_data_record(Config& cfg, const std::string& step_dir, const std::vector<std::string>& user_keys,
                              const std::string& split) {
  const fs::path rec = fs::path(step_dir) / "data_config.json";
  auto user = [&](const std::string& k) { return std::find(user_keys.begin(), user_keys.end(), k) != user_keys.end(); };
  std::string val_split = fashion_mnist(cfg) ? "test" : cfg.get_string("data.val_split");
  if (fs::exists(rec)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(rec.string()));
      if (!user("data.dataset")) cfg.set("data.dataset=" + nlohmann::json(j.at("dataset").get<std::string>()).dump());
      if (!user("data.root") && !user("data.dataset")) cfg.set("data.root=" + nlohmann::json(j.at("root").get<std::string>()).dump());
      if (!user("data.dataset") && !user("data.val_split")) val_split = j.at("val_split").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      BOOSTER_THROW(IOError, "'", rec.string(), "' is not the data record vit_train writes: ", e.what());
    }
  }
  return split.empty() ? val_split : split;
}

Splits make_splits(const Config& cfg, const data::ViTImageProcessor& processor) {
  if (!fashion_mnist(cfg)) return beans_splits(cfg, processor);
  const size_t limit = size_t(cfg.get_int("data.limit"));
  auto train = std::make_shared<data::FashionMNIST>(
      data_root(cfg), true, data::FashionMNIST::default_transform(cfg.get_bool("data.augment")), limit);
  auto val = std::make_shared<data::FashionMNIST>(data_root(cfg), false, data::FashionMNIST::default_transform(false), limit);
  return {train, val, data::FashionMNIST::classes()};
}

std::shared_ptr<const data::Dataset> eval_split(const Config& cfg, const data::ViTImageProcessor& processor,
                                                const std::string& split) {
  if (fashion_mnist(cfg)) {
    BOOSTER_CHECK(split == "train" || split == "test", "--split '", split, "': Fashion-MNIST has \"train\" and \"test\"");
    return std::make_shared<data::FashionMNIST>(data_root(cfg), split == "train", data::FashionMNIST::default_transform(false));
  }
  data::ImageFolderOptions io = folder_options(cfg);
  io.limit = 0;
  return std::make_shared<data::BeansDataset>(data_root(cfg), split, processor, false, 1, io);
}

namespace {
std::shared_ptr<nn::ViTForImageClassification> build_model(const Config& cfg, const std::vector<std::string>& labels) {
  const std::string pretrained = cfg.get_string("model.pretrained");
  if (!pretrained.empty()) {  // (widths beside it are refused by map_legacy_model)
    nn::FromPretrainedOptions fo;
    fo.label_names = labels;
    fo.ignore_mismatched_sizes = true;  // the beans classifier replaces the checkpoint's
    return nn::vit_from_pretrained(pretrained, fo);
  }
  nn::ViTConfig c = nn::ViTConfig::preset(cfg.get_string("model.preset"));
  c.image_size = cfg.get_int("model.image_size");
  if (cfg.get_int("model.patch_size") > 0) c.patch_size = cfg.get_int("model.patch_size");
  c.hidden_dropout_prob = cfg.get_float("model.hidden_dropout_prob");
  if (const int64_t h = cfg.get_int("model.hidden_size"); h > 0) {
    c.hidden_size = h;
    c.intermediate_size = 4 * h;  // the presets' ratio unless intermediate_size says
  }
  if (const int64_t n = cfg.get_int("model.num_hidden_layers"); n > 0) c.num_hidden_layers = n;
  if (const int64_t n = cfg.get_int("model.num_attention_heads"); n > 0) c.num_attention_heads = n;
  if (const int64_t n = cfg.get_int("model.intermediate_size"); n > 0) c.intermediate_size = n;
  BOOSTER_CHECK(c.hidden_size % c.num_attention_heads == 0, cfg.where("model.hidden_size"), ": hidden_size ",
                c.hidden_size, " is not a multiple of num_attention_heads ", c.num_attention_heads);
  c.set_labels(labels);
  return std::make_shared<nn::ViTForImageClassification>(c);
}
}  // namespace

std::shared_ptr<nn::ViTForImageClassification> make_model(const Config& cfg, const std::vector<std::string>& labels) {
  std::shared_ptr<nn::ViTForImageClassification> model;
  if (cfg.get_bool("model.lazy_init")) {
    nn::LazyInit lazy;  // a pretrained folder's tensors become the sources, read at boost
    model = build_model(cfg, labels);
  } else {
    model = build_model(cfg, labels);
  }
  if (cfg.get_bool("model.gradient_checkpointing"))
    model->gradient_checkpointing_enable(cfg.get_float("model.gradient_checkpointing_ratio"));
  return model;
}

data::ViTImageProcessor make_processor(const Config& cfg) {
  const std::string pretrained = cfg.get_string("model.pretrained");
  if (!pretrained.empty()) return data::ViTImageProcessor::from_pretrained(pretrained);
  data::ViTImageProcessor p;
  p.height = p.width = cfg.get_int("model.image_size");
  return p;
}

int keep_checkpoint_batch(Config& cfg, int dp, const std::string& resume) {
  if (resume.empty()) return dp;
  const std::optional<DataLayout> was = saved_layout(resume);
  if (!was || was->dp_size == dp) return dp;
  const int64_t b = cfg.get_int("train.batch_size"), k = cfg.get_int("train.gradient_accumulation");
  const BatchPlan plan = batch_keeping(was->global_batch(), dp, b);
  cfg.set("train.batch_size=" + std::to_string(plan.batch_size));
  cfg.set("train.gradient_accumulation=" + std::to_string(plan.gradient_accumulation));
  dist::logger().info("resume: the checkpoint's run had {}; on {} replicas its global batch is kept with "
                      "train.batch_size {} (was {}) and train.gradient_accumulation {} (was {})",
                      was->describe(), dp, plan.batch_size, b, plan.gradient_accumulation, k);
  // The replicas the configured batch makes the global one (the first run's, over a chain of resumes).
  return was->global_batch() % (b * k) == 0 ? int(was->global_batch() / (b * k)) : int(was->dp_size);
}

std::shared_ptr<optim::Optimizer> make_optimizer(const Config& cfg, const nn::Module& model, int dp) {
  const std::string scaling = cfg.get_string("train.lr_scaling"), name = cfg.get_string("train.optimizer");
  BOOSTER_CHECK(scaling == "dp" || scaling == "none", "train.lr_scaling = '", scaling, "': expected \"dp\" or \"none\"");
  const double lr = cfg.get_float("train.lr") * (scaling == "dp" ? dp : 1), wd = cfg.get_float("train.weight_decay");
  const auto params = nn::trainable_parameters(model);  // all but what LoRA froze
  const std::vector<double> betas = cfg.get_float_list("train.betas");
  BOOSTER_CHECK(betas.size() == 2 && betas[0] >= 0 && betas[0] < 1 && betas[1] >= 0 && betas[1] < 1,
                cfg.where("train.betas"), ": train.betas must be two numbers in [0, 1), (beta1, beta2)");
  const double eps = cfg.get_float("train.eps");
  auto moments = [&](auto& o) {
    o.lr = lr, o.beta1 = betas[0], o.beta2 = betas[1];
    if (eps > 0) o.eps = eps;
  };
  if (name == "hybrid_adam" || name == "adamw") {
    optim::AdamOptions ao;
    moments(ao);
    if (name == "adamw") return std::make_shared<optim::AdamW>(optim::param_groups_no_decay(params, wd), ao);
    return std::make_shared<optim::HybridAdam>(optim::param_groups_no_decay(params, wd), ao);
  }
  if (name == "lamb") {
    optim::LambOptions lo;
    moments(lo);
    lo.bias_correction = cfg.get_bool("train.bias_correction");
    return std::make_shared<optim::Lamb>(
        optim::lamb_param_groups(params, wd, cfg.get_bool("train.exclude_from_layer_adaptation")), lo);
  }
  BOOSTER_CHECK(name == "lars", "train.optimizer = '", name, "': expected \"hybrid_adam\", \"adamw\", \"lamb\" or \"lars\"");
  optim::LarsOptions lo;
  lo.lr = lr, lo.momentum = cfg.get_float("train.momentum"), lo.eeta = cfg.get_float("train.lars_eeta");
  return std::make_shared<optim::Lars>(optim::lars_param_groups(params, wd), lo);
}

std::string describe_optimizer(const optim::Optimizer& optimizer) {
  std::string s = optimizer.type_name() + ":";
  const auto& groups = optimizer.param_groups();
  for (const auto& [k, v] : groups.at(0).options) s += fmt::format(" {} {:g},", k, v);
  s.pop_back();
  for (size_t i = 1; i < groups.size(); ++i) {  // what the other groups set otherwise
    std::string diff;
    for (const auto& [k, v] : groups[i].options) {
      const auto first = groups[0].options.find(k);
      if (first == groups[0].options.end() || first->second != v) diff += fmt::format(" {} {:g},", k, v);
    }
    if (!diff.empty()) diff.pop_back();
    s += fmt::format("; group {} ({} tensors):{}", i, groups[i].params.size(), diff.empty() ? " the same" : diff);
  }
  return s;
}

std::shared_ptr<optim::LRScheduler> make_lr_scheduler(const Config& cfg, optim::Optimizer& optimizer,
                                                      int64_t total_steps) {
  const std::string name = cfg.get_string("train.lr_scheduler");
  const int64_t warmup = int64_t(double(total_steps) * cfg.get_float("train.warmup_ratio"));
  if (name == "cosine_warmup") return std::make_shared<optim::CosineAnnealingWarmupLR>(optimizer, total_steps, warmup);
  BOOSTER_CHECK(name == "linear_warmup", "train.lr_scheduler = '", name,
                "': expected \"cosine_warmup\" or \"linear_warmup\"");
  return std::make_shared<optim::LinearWarmupLR>(optimizer, total_steps, warmup);
}

std::shared_ptr<Plugin> make_bench_plugin(const std::string& config, const std::string& precision, std::string& mixed) {
  mixed = precision;
  if (config == "none") return nullptr;
  Config cfg = Config::from_file(config);
  std::shared_ptr<Plugin> plugin = plugins::make_plugin(cfg);
  if (!plugin->control_precision()) return plugin;
  cfg.set("plugin." + plugin->precision_option() + "=" + precision);
  mixed = "";
  return plugins::make_plugin(cfg);
}

}  // namespace booster::examples
