// from_pretrained / save_pretrained.
#include "nn/pretrained.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/autograd/grad_mode.h"
#include "core/tensor/lazy.h"
#include "nn/safetensors.h"

namespace booster::nn {

std::shared_ptr<ViTForImageClassification> vit_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts) {
  namespace fs = std::filesystem;
  ViTConfig cfg = ViTConfig::from_json_file((fs::path(dir) / "config.json").string());
  if (!opts.label_names.empty()) cfg.set_labels(opts.label_names);
  else if (opts.num_labels && *opts.num_labels != cfg.num_labels) {
    cfg.num_labels = *opts.num_labels;
    cfg.id2label.clear();
  }
  StateDict ckpt = load_safetensors_dir(dir);
  std::shared_ptr<ViTForImageClassification> model;
  {
    // Random init only matters for tensors the checkpoint does not cover; draw it anyway
    // so a model is the same whatever the checkpoint holds.
    model = std::make_shared<ViTForImageClassification>(cfg);
  }
  std::map<std::string, Tensor> given;
  bool has_prefix = false;
  for (auto& [n, t] : ckpt) has_prefix |= n.rfind("vit.", 0) == 0;
  for (auto& [n, t] : ckpt) given[has_prefix || n.rfind("classifier.", 0) == 0 ? n : "vit." + n] = t;

  std::vector<std::string> missing, mismatched_ok;
  std::set<std::string> used;
  NoGradGuard ng;
  for (auto& [name, p] : model->state_dict()) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    if (it->second.shape() != p.shape()) {
      const std::string msg = name + ": found shape " + shape_str(it->second.shape()) + " in the checkpoint and " +
                              shape_str(p.shape()) + " in the model instantiated";
      BOOSTER_CHECK(opts.ignore_mismatched_sizes, dir, ": size mismatch for ", msg,
                    "; pass ignore_mismatched_sizes to re-initialize it");
      mismatched_ok.push_back(msg);
      continue;
    }
    BOOSTER_CHECK_T(DTypeError, is_floating(it->second.dtype()) == is_floating(p.dtype()), dir, ": tensor '", name,
                    "' is ", dtype_name(it->second.dtype()), " in the checkpoint, ", dtype_name(p.dtype()),
                    " in the model");
    assign_or_adopt(p, it->second);  // a lazy model (nn::LazyInit) reads it at boost, only what a rank keeps
  }
  std::vector<std::string> unexpected;
  for (auto& [n, t] : given)
    if (!used.count(n)) unexpected.push_back(n);
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += "\n  " + x;
    return s;
  };
  if (!unexpected.empty())
    spdlog::warn("Some weights of the checkpoint at {} were not used when initializing ViTForImageClassification:{}", dir,
                 joined(unexpected));
  if (!missing.empty())
    spdlog::warn("Some weights of ViTForImageClassification were not initialized from the checkpoint at {} and are newly "
                 "initialized:{}",
                 dir, joined(missing));
  if (!mismatched_ok.empty())
    spdlog::warn("Some weights of ViTForImageClassification were not initialized from the checkpoint at {} and are newly "
                 "initialized because the shapes did not match:{}",
                 dir, joined(mismatched_ok));
  return model;
}

void save_pretrained(const ViTForImageClassification& model, const std::string& dir, size_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  model.config().save((std::filesystem::path(dir) / "config.json").string());
  save_safetensors_dir(dir, model.state_dict(), max_shard_bytes);
}

}  // namespace booster::nn
