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

void load_pretrained_state(Module& model, const std::map<std::string, Tensor>& given, const std::string& dir,
                           const std::string& cls, bool ignore_mismatched_sizes) {
  std::vector<std::string> missing, mismatched_ok;
  std::set<std::string> used;
  NoGradGuard ng;
  for (auto& [name, p] : model.state_dict()) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    if (it->second.shape() != p.shape()) {
      const std::string msg = name + ": found shape " + shape_str(it->second.shape()) + " in the checkpoint and " +
                              shape_str(p.shape()) + " in the model instantiated";
      BOOSTER_CHECK(ignore_mismatched_sizes, dir, ": size mismatch for ", msg,
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
    spdlog::warn("Some weights of the checkpoint at {} were not used when initializing {}:{}", dir, cls,
                 joined(unexpected));
  if (!missing.empty())
    spdlog::warn("Some weights of {} were not initialized from the checkpoint at {} and are newly initialized:{}", cls,
                 dir, joined(missing));
  if (!mismatched_ok.empty())
    spdlog::warn("Some weights of {} were not initialized from the checkpoint at {} and are newly initialized because "
                 "the shapes did not match:{}",
                 cls, dir, joined(mismatched_ok));
}

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// A checkpoint's tensors under the model's names: the base model's `prefix` ("vit.",
// "transformer.", "model.") added where the file holds a bare base model (the `head`'s tensors
// keep theirs), the buffers transformers saved (`drop` suffixes) left out.
std::map<std::string, Tensor> hf_names(const StateDict& ckpt, const std::string& prefix, const std::string& head,
                                       const std::vector<std::string>& drop = {}) {
  bool has_prefix = false;
  for (auto& [n, t] : ckpt) has_prefix |= starts_with(n, prefix);
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : ckpt) {
    bool buffer = false;
    for (auto& d : drop) buffer |= ends_with(n, d);
    if (!buffer) out[has_prefix || starts_with(n, head) ? n : prefix + n] = t;
  }
  return out;
}

}  // namespace

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
  load_pretrained_state(*model, hf_names(ckpt, "vit.", "classifier."), dir, "ViTForImageClassification",
                        opts.ignore_mismatched_sizes);
  return model;
}

namespace {

template <typename M, typename C>
std::shared_ptr<M> lm_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts, const char* cls,
                                      const std::string& prefix, const std::vector<std::string>& drop) {
  const C cfg = C::from_json_file((std::filesystem::path(dir) / "config.json").string());
  auto model = std::make_shared<M>(cfg);
  load_pretrained_state(*model, hf_names(load_safetensors_dir(dir), prefix, "lm_head.", drop), dir, cls,
                        opts.ignore_mismatched_sizes);
  return model;
}

template <typename M>
void save_model_folder(const M& model, const std::string& dir, size_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  model.config().save((std::filesystem::path(dir) / "config.json").string());
  save_safetensors_dir(dir, model.state_dict(), max_shard_bytes);
}

}  // namespace

std::shared_ptr<GPT2LMHeadModel> gpt2_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts) {
  return lm_from_pretrained<GPT2LMHeadModel, GPT2Config>(dir, opts, "GPT2LMHeadModel", "transformer.",
                                                         {".attn.bias", ".attn.masked_bias"});
}

std::shared_ptr<LlamaForCausalLM> llama_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts) {
  return lm_from_pretrained<LlamaForCausalLM, LlamaConfig>(dir, opts, "LlamaForCausalLM", "model.",
                                                           {".rotary_emb.inv_freq"});
}

void save_pretrained(const GPT2LMHeadModel& model, const std::string& dir, size_t max_shard_bytes) {
  save_model_folder(model, dir, max_shard_bytes);
}

void save_pretrained(const LlamaForCausalLM& model, const std::string& dir, size_t max_shard_bytes) {
  save_model_folder(model, dir, max_shard_bytes);
}

void save_pretrained(const ViTForImageClassification& model, const std::string& dir, size_t max_shard_bytes) {
  save_model_folder(model, dir, max_shard_bytes);
}

}  // namespace booster::nn
