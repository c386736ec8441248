// ZeroPartition: what a ZeRO rank owns of the parameters (Colossal-AI's low-level ZeRO
// layout). Each parameter is flattened and split into dp chunks of ceil(numel / dp)
// elements, the last padded; rank r owns chunk r: its fp32 master (in RAM, or in the disk
// store with cpu_offload) and its optimizer state. The one owner of the masters: the
// optimizer updates them, LowLevelZeroModel's checkpoints hold them, and gather() writes
// every rank's chunks back into the working parameters, in buckets, at once or in the
// background until the next forward waits for it.
#pragma once

#include <map>

#include <memory>
#include <string>
#include <vector>

#include "booster/model_wrapper.h"
#include "core/dist/collectives.h"
#include "core/tensor/offload_store.h"
#include "optim/optimizer.h"

namespace booster::plugins {

/// A checkpoint entry's source for slot `id` of `store` (which it keeps alive): read into RAM
/// while the checkpoint writes or fills it.
std::shared_ptr<const StateTensor::Source> store_source(std::shared_ptr<OffloadStore> store, int64_t id);

class ZeroPartition {
 public:
  struct Part {
    std::string name;
    Tensor param;          // the working parameter (full, working dtype)
    int64_t numel, chunk;  // elements, and elements per rank (ceil(numel / dp))
    int64_t lo, n;         // this rank's elements [lo, lo + n) of the flattened parameter
    Region region;         // the same, as a region of the logical tensor
    Tensor master;         // fp32 [n] in RAM; undefined when offloaded or without masters
    int64_t master_slot = -1;  // its slot in the disk store when offloaded
    bool offloaded = false;  // its master and optimizer state live in the disk store
    Tensor own;            // ZeRO-3: this rank's slice [n] (working dtype) while the parameter is released
    int64_t own_slot = -1;  // ...or its slot in the disk store (Gemini's offload_param_frac)
    Shape shape;           // the parameter's shape (it is [0] while released)
    bool resident = false;  // auto placement keeps its slots on the disk tier pinned in RAM
  };

  /// Partitions `params` over `dp` (ranks hold equal parameters: they start from rank 0's).
  /// master_weights: keep fp32 masters of the chunks; store: where they live when offloaded;
  /// offload_frac: the share of the elements (first parameters first) offloaded to it.
  ZeroPartition(const optim::NamedParams& params, const dist::ProcessGroup& dp, DType working, bool master_weights,
                double bucket_elems, std::shared_ptr<OffloadStore> store, double offload_frac = 1.0);

  const dist::ProcessGroup& group() const { return dp_; }
  DType working_dtype() const { return working_; }
  bool has_masters() const { return master_weights_; }
  std::vector<Part>& parts() { return parts_; }
  const std::vector<Part>& parts() const { return parts_; }
  OffloadStore* store() const { return store_.get(); }
  const std::shared_ptr<OffloadStore>& shared_store() const { return store_; }
  /// Parts grouped in buckets of about bucket_elems elements, last parameters first (the
  /// order backward finishes them).
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  /// Buckets of about bucket_elems elements packed from the parts in `order` (every part
  /// once; the order backward finishes them), the first capped at 2^18 elements.
  std::vector<std::vector<size_t>> pack_buckets(const std::vector<size_t>& order, double bucket_elems) const;
  /// Regroups the parts into `buckets` (Gemini: in the order the first forward used them).
  /// Between steps (no bucket in use; gathers in flight are finished first). The parts keep
  /// their state and their slices; a bucket holding a sharded part is sharded.
  void rebucket(std::vector<std::vector<size_t>> buckets);

  /// The fp32 master chunk of part i in RAM (fetched from the store when offloaded; give it
  /// back with release_master).
  Tensor master(size_t i);
  void release_master(size_t i, bool dirty);
  /// Starts fetching part i's master ahead of use (offload only).
  void prefetch_master(size_t i);
  /// This rank's slice [lo, lo + n) of part i's working parameter (flat); in RAM (read from
  /// the store when offloaded: give it back with release_own).
  Tensor own_slice(size_t i) const;
  /// Gives back an offloaded own slice taken with own_slice (dirty: it was written).
  void release_own(size_t i, bool dirty) const;
  /// Starts reading an offloaded own slice ahead of use.
  void prefetch_own(size_t i) const;
  /// Starts reading bucket b's offloaded own slices ahead of its fetch.
  void prefetch_own_bucket(size_t b) const;

  // ---- ZeRO-3 (Gemini): a sharded bucket's parameters exist in full only while fetched ----
  /// Keeps only this rank's slices of bucket b's parameters; they are released ([0]) until fetch(b).
  void shard_bucket(size_t b);
  /// A bucket's parts are all sharded or none (shard_bucket and rebucket keep it so).
  bool is_sharded(size_t b) const { return part_sharded(buckets_.at(b).front()); }
  bool is_fetched(size_t b) const { return !is_sharded(b) || fetched_.at(b); }
  /// Part i keeps only its slice (in RAM or on the disk tier).
  bool part_sharded(size_t i) const { return parts_.at(i).own.defined() || parts_[i].own_slot >= 0; }
  /// All-gathers bucket b's parameters from every rank's slices (collective over the group;
  /// finishes a prefetch of it).
  void fetch(size_t b);
  /// Starts all-gathering bucket b in the background (fetch(b) finishes it); every rank
  /// must prefetch in the same order.
  void prefetch(size_t b);
  /// Releases a fetched sharded bucket's parameters (its slices stay).
  void release(size_t b);
  /// Moves a sharded bucket's own slices to the disk store (read back when used).
  void offload_own(size_t b);
  /// The bucket holding part i.
  size_t bucket_of(size_t i) const { return bucket_of_.at(i); }
  /// Bytes of working parameters held in full right now (fetched or never sharded).
  size_t full_bytes() const;

  /// All-gathers every rank's own slice into the working parameters (of the buckets that
  /// are not sharded: those are fetched when used). async: returns at
  /// once, and wait_gather() (the next forward) finishes it.
  void gather(bool async);
  /// Copies every master into its own slice, then gathers (after loading masters).
  void refresh_working();
  /// Finishes a pending gather (the next forward calls it).
  void wait_gather();
  bool gather_pending() const { return !pending_.empty(); }

  /// The model's state with this rank's master chunks (flat regions of their tensors; an
  /// offloaded one read from the disk tier only while a checkpoint writes or fills it) in
  /// place of the partitioned parameters; without masters, the state as given. Loading into
  /// them, then after_load(), restores them.
  ShardedState substitute(ShardedState state);
  /// Refreshes the parameters from the loaded masters.
  void after_load();

 private:
  struct Pending {
    std::vector<size_t> parts;
    Tensor recv;
    dist::WorkPtr work;
    Tensor send;
  };
  /// This rank's slices of a bucket's parts, each padded to its chunk: the all-gather's input.
  Tensor pack_own(const std::vector<size_t>& bucket) const;
  void set_buckets(std::vector<std::vector<size_t>> buckets);
  /// Starts all-gathering a bucket's slices.
  Pending start_gather(const std::vector<size_t>& bucket) const;
  /// Waits for it and writes every rank's slices into the parameters (into new storage when
  /// `fresh`: the parameters were released).
  void finish_gather(Pending& pend, bool fresh);

  const dist::ProcessGroup& dp_;
  DType working_;
  bool master_weights_;
  std::shared_ptr<OffloadStore> store_;
  std::vector<Part> parts_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> fetched_;  // per bucket: a sharded bucket's parameters are whole now
  std::map<size_t, Pending> prefetched_;  // by bucket
  std::vector<Pending> pending_;
};

}  // namespace booster::plugins
