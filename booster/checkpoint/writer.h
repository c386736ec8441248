// Saving a checkpoint from every rank at once. Each rank passes the tensors it holds, each
// a region of a logical tensor; every distinct (tensor, region) is written once, by the
// holder with the fewest bytes assigned so far (replicas share the writing), split into
// records of bounded size and packed into that rank's shard files. Rank 0 merges the
// ranks' record locations into the index and writes it last, so a save killed half-way
// leaves the previous checkpoint loadable. Nothing is gathered: no rank needs more memory
// than one record. Any failure on any rank is raised on every rank, naming it.
#pragma once

#include <optional>
#include <string>

#include "booster/checkpoint/async_writer.h"

#include "booster/model_wrapper.h"
#include "proto/checkpoint.pb.h"

namespace booster::ckpt {

struct WriteOptions {
  bool shard = false;            // a folder of shard files plus an index, or one file
  std::string prefix;            // prepended to file names in a folder
  size_t max_shard_bytes = size_t(1024) << 20;
  std::string kind = "model";
  proto::Layout layout;
  const proto::OptimizerMeta* optimizer = nullptr;  // kind "optimizer": merged metadata
};

/// Largest record (bytes): records split larger pieces so a reader never holds more.
constexpr size_t kMaxRecordBytes = size_t(64) << 20;

/// Collective over the world (a plain process without MPI is a world of one): writes what
/// every rank holds at path (a folder when shard, else a file). The regions of each tensor,
/// over all ranks, must tile it (replicas hold equal regions); ValueError otherwise.
void save_state(const std::string& path, const ShardedState& mine, const WriteOptions& opts);

/// save_state with the writing done by `writer`'s background thread: the rank's pieces are
/// planned with every rank and copied (a snapshot) before it returns, so training may change
/// them at once; the records and the index are written behind. Pieces beyond the staging
/// budget (`staging_bytes`; default BOOSTER_ASYNC_STAGING_MB, else half the RAM available)
/// are written before it returns. Errors are raised by writer.synchronize(), on every rank.
/// Waits for the writer's saves in flight first when one of them is of the same kind (at
/// most one model and one optimizer snapshot staged).
void save_state_async(const std::string& path, const ShardedState& mine, const WriteOptions& opts, AsyncWriter& writer,
                      std::optional<size_t> staging_bytes = std::nullopt);

/// save_state_async's default staging budget: BOOSTER_ASYNC_STAGING_MB, else half of the
/// kernel's MemAvailable (1 GB where /proc/meminfo does not say).
size_t default_staging_bytes();

/// The index file name of a kind in a folder.
std::string index_file_name(const std::string& prefix, const std::string& kind);

}  // namespace booster::ckpt
