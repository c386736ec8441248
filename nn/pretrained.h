// Hugging Face model folders: from_pretrained / save_pretrained for ViT classifiers, GPT-2
// and LLaMA, under transformers' tensor names.
#pragma once

#include <map>
#include <optional>

#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/vit.h"

namespace booster::nn {

/// Options of from_pretrained, as Hugging Face's keyword arguments.
struct FromPretrainedOptions {
  std::optional<int64_t> num_labels;     // overrides config.json (beans: 3)
  std::vector<std::string> label_names;  // sets id2label (and num_labels) when given
  bool ignore_mismatched_sizes = false;  // re-initialize tensors whose shape differs, with a warning
};

/// Loads config.json and the weights of a model folder. Checkpoint keys without the
/// "vit." prefix (a bare ViTModel) are mapped onto it. Tensors the checkpoint lacks are
/// initialized as new (with a warning naming them); shape mismatches are an error unless
/// ignore_mismatched_sizes; unexpected tensors are reported and skipped.
std::shared_ptr<ViTForImageClassification> vit_from_pretrained(const std::string& dir,
                                                               const FromPretrainedOptions& opts = {});
/// GPT-2 from a transformers folder: keys with or without the "transformer." prefix, the
/// attn.bias / attn.masked_bias buffers ignored, a missing lm_head.weight taken as tied.
std::shared_ptr<GPT2LMHeadModel> gpt2_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts = {});
/// LLaMA from a transformers folder: keys with or without the "model." prefix, the
/// rotary_emb.inv_freq buffers older versions saved ignored.
std::shared_ptr<LlamaForCausalLM> llama_from_pretrained(const std::string& dir, const FromPretrainedOptions& opts = {});

/// Writes config.json and model.safetensors (sharded past max_shard_bytes when non-zero),
/// as transformers' save_pretrained (a tied head has no lm_head.weight of its own).
void save_pretrained(const ViTForImageClassification& model, const std::string& dir, size_t max_shard_bytes = 0);
void save_pretrained(const GPT2LMHeadModel& model, const std::string& dir, size_t max_shard_bytes = 0);
void save_pretrained(const LlamaForCausalLM& model, const std::string& dir, size_t max_shard_bytes = 0);

/// Copies `given` (transformers' names) into the model's tensors: a shape mismatch is an
/// error naming the tensor unless ignore_mismatched_sizes; tensors the model lacks or the
/// checkpoint lacks are warned about by name, as transformers words it. `cls` names the
/// model class in messages.
void load_pretrained_state(Module& model, const std::map<std::string, Tensor>& given, const std::string& dir,
                           const std::string& cls, bool ignore_mismatched_sizes);

}  // namespace booster::nn
