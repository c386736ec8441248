// What vit_train builds before boost, from its config: the datasets (beans, or
// Fashion-MNIST for the large-batch recipe), the model, the optimizer (HybridAdam, AdamW,
// LAMB, LARS) and its schedule. A value a key does not accept is an error naming the key.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "booster/plugin.h"
#include "core/common/config.h"
#include "data/dataset.h"
#include "data/image_processor.h"
#include "nn/vit.h"
#include "optim/lr_scheduler.h"

namespace booster::examples {

/// The training and validation splits and their class names.
struct Splits {
  std::shared_ptr<const data::Dataset> train, val;
  std::vector<std::string> labels;
};

/// data.dataset = "beans" (an image folder; the two splits must have the same classes) or
/// "fashion_mnist" (the IDX files; validation is the test split).
Splits make_splits(const Config& cfg, const data::ViTImageProcessor& processor);
/// One whole split of data.dataset for --eval-only ("train" or "test" for fashion_mnist).
std::shared_ptr<const data::Dataset> eval_split(const Config& cfg, const data::ViTImageProcessor& processor,
                                                const std::string& split);
/// What a checkpoint records of the data it was trained on (data_config.json in each step
/// folder): data.dataset, the resolved root, the splits, data.limit.
std::string data_record(const Config& cfg);
/// --eval-only's data: the checkpoint's record (when the step folder has one) sets
/// data.dataset and data.root unless `user_keys` names them (set on the command line or in
/// the --config file); returns the split to score: `split` when given, else the run's
/// validation split.
std::string apply_data_record(Config& cfg, const std::string& step_dir, const std::vector<std::string>& user_keys,
                              const std::string& split);

/// The model: a preset trained from scratch, or a Hugging Face folder with a new classifier.
std::shared_ptr<nn::ViTForImageClassification> make_model(const Config& cfg, const std::vector<std::string>& labels);
/// The image processor: the pretrained model's, or the defaults at model.image_size.
data::ViTImageProcessor make_processor(const Config& cfg);
/// train.optimizer over the model's parameters (no decay on biases and norms; LARS also
/// leaves them out of its trust ratio), at train.lr times dp under train.lr_scaling = "dp".
std::shared_ptr<optim::Optimizer> make_optimizer(const Config& cfg, const nn::Module& model, int dp);
/// "Lamb: lr 0.02, beta1 0.9, ..." (the first group's options; the group count when several).
std::string describe_optimizer(const optim::Optimizer& optimizer);
/// train.lr_scheduler over total_steps optimizer steps, warmup_ratio of them warming up.
std::shared_ptr<optim::LRScheduler> make_lr_scheduler(const Config& cfg, optim::Optimizer& optimizer,
                                                      int64_t total_steps);

/// Resuming (`resume` not empty) a checkpoint whose run had another data-parallel size:
/// train.batch_size and train.gradient_accumulation set so that this run's dp replicas keep
/// its global batch (the accumulation making up for fewer replicas, a smaller batch for
/// more; BatchPlan), said in the log. Returns the replicas the learning rate is scaled for
/// under train.lr_scaling = "dp": the global batch over the configured batch x accumulation.
int keep_checkpoint_batch(Config& cfg, int dp, const std::string& resume);

/// A benchmark row's plugin: the [plugin] table of `config` (or none for "none"); a plugin
/// that owns precision takes `precision` as its own argument, and `mixed` (the Booster's
/// mixed_precision) becomes "" then, else stays `precision`.
std::shared_ptr<Plugin> make_bench_plugin(const std::string& config, const std::string& precision, std::string& mixed);

}  // namespace booster::examples
