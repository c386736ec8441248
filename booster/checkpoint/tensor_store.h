// Named tensors on disk: split into records of at most one shard, packed into shards of
// at most size_per_shard bytes, indexed by name. Loading verifies the format version, the
// save id tying shards to their index, every checksum, dtype, shape and that the records
// cover each tensor exactly; every failure names the file and the tensor.
#pragma once

#include <string>

#include "booster/checkpoint/container.h"
#include "nn/module.h"

namespace booster::ckpt {

struct SaveOptions {
  bool shard = false;            // a folder of shards plus an index, or one file
  std::string prefix;            // prepended to file names in a folder
  size_t max_shard_bytes = size_t(1024) << 20;
  std::string kind = "model";
  proto::Layout layout;
  const proto::OptimizerMeta* optimizer = nullptr;
};

/// Writes tensors at path (a folder when shard, else a file). Previous checkpoints in the
/// folder stay loadable until the new index is in place.
void save_tensors(const std::string& path, const nn::StateDict& tensors, const SaveOptions& opts);

struct LoadedTensors {
  proto::Index index;
  nn::StateDict tensors;
  std::string source;  // the file the index came from
};

/// Reads and verifies what save_tensors wrote; `kind` must match.
LoadedTensors load_tensors(const std::string& path, const std::string& kind, const std::string& prefix = "");
/// The index file name of a kind in a folder.
std::string index_file_name(const std::string& prefix, const std::string& kind);

}  // namespace booster::ckpt
