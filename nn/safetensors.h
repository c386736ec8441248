// safetensors reader and writer (F32, F16, BF16, I64, U8; __metadata__ kept) and the
// sharded layout of Hugging Face (model.safetensors.index.json). Every malformed input is
// an IOError naming the file and the tensor.
#pragma once

#include <map>
#include <string>

#include "nn/module.h"

namespace booster::nn {

/// The contents of one safetensors file.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  StateDict tensors;  // in file order
  /// The tensor called name; throws IOError naming the file.
  Tensor at(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::string path;
};

/// Reads and validates a .safetensors file.
SafetensorsFile load_safetensors(const std::string& path);
/// Writes tensors (any strides; stored contiguous) and metadata atomically.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

/// Loads every tensor of a model folder: model.safetensors, or the shards listed in
/// model.safetensors.index.json (a listed tensor missing from its shard is an error).
StateDict load_safetensors_dir(const std::string& dir);
/// Writes model.safetensors, or shards of at most max_shard_bytes plus the index when
/// the tensors do not fit in one.
void save_safetensors_dir(const std::string& dir, const StateDict& tensors, size_t max_shard_bytes = 0);

}  // namespace booster::nn
