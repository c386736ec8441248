// Hugging Face model folders: from_pretrained / save_pretrained for ViT classifiers.
#pragma once

#include <optional>

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
/// Writes config.json and model.safetensors (sharded past max_shard_bytes when non-zero).
void save_pretrained(const ViTForImageClassification& model, const std::string& dir, size_t max_shard_bytes = 0);

}  // namespace booster::nn
