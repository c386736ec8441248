// The ZeRO gatherer: the all-gather driver that writes every rank's slices back into the
// working parameters, bucket by bucket. After a step it gathers every bucket that is not
// sharded, at once or in the background until the next forward waits for it
// (overlap_allgather). A sharded bucket (ZeRO-3: Gemini's chunk) keeps only this rank's
// slices; its parameters exist in full only between fetch() and release() (the fetch
// hooks drive both from the modules that use them, and prefetch the next buckets in the
// order the first forward used them).
#pragma once

#include <map>
#include <vector>

#include "core/dist/collectives.h"
#include "zero/shard_store.h"

namespace booster::zero {

class Gatherer {
 public:
  Gatherer(Layout& layout, ShardStore& shards);

  /// Keeps only this rank's slices of bucket b's parameters; they are released ([0]) until fetch(b).
  void shard_bucket(size_t b);
  /// A bucket's parts are all sharded or none (shard_bucket and rebucket keep it so).
  bool is_sharded(size_t b) const { return shards_.sharded(layout_.buckets().at(b).front()); }
  bool is_fetched(size_t b) const { return !is_sharded(b) || fetched_.at(b); }
  /// All-gathers bucket b's parameters from every rank's slices (collective over the group;
  /// finishes a prefetch of it).
  void fetch(size_t b);
  /// Starts all-gathering bucket b in the background (fetch(b) finishes it); every rank
  /// must prefetch in the same order.
  void prefetch(size_t b);
  /// Starts reading bucket b's slices on the disk tier ahead of its fetch.
  void prefetch_own(size_t b) const;
  /// Releases a fetched sharded bucket's parameters (its slices stay).
  void release(size_t b);
  /// Moves a sharded bucket's slices to the disk tier (read back when used).
  void offload_bucket(size_t b);
  /// Bytes of working parameters held in full right now (fetched or never sharded).
  size_t full_bytes() const;
  /// Regroups the parts into `buckets` (Gemini: in the order the first forward used them),
  /// between steps; a bucket holding a sharded part is sharded.
  void rebucket(std::vector<std::vector<size_t>> buckets);

  /// All-gathers every rank's slice into the working parameters of the buckets that are
  /// not sharded (sharded ones are fetched when used). async: returns at once, and
  /// wait_gather() (the next forward) finishes it.
  void gather(bool async);
  void wait_gather();
  bool gather_pending() const { return !pending_.empty(); }
  /// Copies every master into its slice, then gathers (after loading masters).
  void refresh_working();

 private:
  struct Pending {
    std::vector<size_t> parts;
    Tensor recv;
    dist::WorkPtr work;
    Tensor send;
  };
  /// This rank's slices of a bucket's parts, each padded to its chunk: the all-gather's input.
  Tensor pack_own(const std::vector<size_t>& bucket) const;
  Pending start_gather(const std::vector<size_t>& bucket) const;
  /// Waits for it and writes every rank's slices into the parameters (into new storage when
  /// `fresh`: the parameters were released).
  void finish_gather(Pending& pend, bool fresh);
  /// Finishes every gather in flight and drops the prefetches (they carry old slices).
  void settle();

  Layout& layout_;
  ShardStore& shards_;
  std::vector<bool> fetched_;             // per bucket: a sharded bucket's parameters are whole now
  std::map<size_t, Pending> prefetched_;  // by bucket
  std::vector<Pending> pending_;
};

}  // namespace booster::zero
