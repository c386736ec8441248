// Whole named tensors in a checkpoint, for tools and single-process use: a thin layer over
// the distributed writer and the reader (collective like them when MPI runs).
#pragma once

#include <string>

#include "booster/checkpoint/reader.h"
#include "booster/checkpoint/writer.h"
#include "nn/module.h"

namespace booster::ckpt {

using SaveOptions = WriteOptions;

/// Writes whole tensors at path (a folder when shard, else a file). Previous checkpoints in
/// the folder stay loadable until the new index is in place.
void save_tensors(const std::string& path, const nn::StateDict& tensors, const SaveOptions& opts);

struct LoadedTensors {
  proto::Index index;
  nn::StateDict tensors;
  std::string source;  // the file the index came from
};

/// Reads and verifies every tensor of a checkpoint of `kind`, whole.
LoadedTensors load_tensors(const std::string& path, const std::string& kind, const std::string& prefix = "");

}  // namespace booster::ckpt
