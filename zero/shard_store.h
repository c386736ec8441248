// The ZeRO shard store: what a rank keeps of each part of the layout, across RAM and the
// disk tier (OffloadStore, with its own accounting): the fp32 master of its chunk (in RAM,
// or on disk with cpu_offload / Gemini's offload_optim_frac), and, for a part that is
// sharded (ZeRO-3), its slice of the working parameter (in RAM, or on disk with Gemini's
// offload_param_frac). Masters and slices pass through RAM one part at a time: take one
// (master, own_slice), give it back (release_*), read the next ahead (prefetch_*).
// Checkpoints hold the masters in place of the partitioned parameters (substitute).
#pragma once

#include <memory>

#include "booster/model_wrapper.h"
#include "core/tensor/offload_store.h"
#include "zero/layout.h"

namespace booster::zero {

/// A checkpoint entry's source for slot `id` of `store` (which it keeps alive): read into RAM
/// while the checkpoint writes or fills it.
std::shared_ptr<const StateTensor::Source> store_source(std::shared_ptr<OffloadStore> store, int64_t id);

/// What this rank keeps of one part beside the working parameter.
struct Shard {
  Tensor master;             // fp32 [n] in RAM; undefined when offloaded or without masters
  int64_t master_slot = -1;  // its slot on the disk tier when offloaded
  bool offloaded = false;    // its master and optimizer state live on the disk tier
  Tensor own;                // ZeRO-3: this rank's slice [n] (working dtype) while sharded
  int64_t own_slot = -1;     // ...or its slot on the disk tier
  bool resident = false;     // auto placement pins its slots on the disk tier in RAM
};

class ShardStore {
 public:
  /// Turns the layout's parameters into `working` copies (same handles) and keeps fp32
  /// masters of this rank's chunks (master_weights); `store` holds the first offload_frac
  /// of the elements' masters (first parameters first).
  ShardStore(Layout& layout, DType working, bool master_weights, std::shared_ptr<OffloadStore> store,
             double offload_frac);

  DType working_dtype() const { return working_; }
  bool has_masters() const { return master_weights_; }
  OffloadStore* store() const { return store_.get(); }
  const std::shared_ptr<OffloadStore>& shared_store() const { return store_; }
  Shard& at(size_t i) { return shards_.at(i); }
  const Shard& at(size_t i) const { return shards_.at(i); }

  /// The fp32 master chunk of part i in RAM (read from the disk tier when offloaded; give it
  /// back with release_master).
  Tensor master(size_t i);
  void release_master(size_t i, bool dirty);
  void prefetch_master(size_t i);
  /// This rank's slice [lo, lo + n) of part i's working parameter (flat) in RAM: the
  /// parameter's own elements, or the kept slice of a sharded part (read from the disk
  /// tier when it lives there: give it back with release_own).
  Tensor own_slice(size_t i) const;
  void release_own(size_t i, bool dirty) const;
  void prefetch_own(size_t i) const;
  /// Part i keeps only its slice (in RAM or on the disk tier).
  bool sharded(size_t i) const { return shards_.at(i).own.defined() || shards_[i].own_slot >= 0; }
  /// Keeps a copy of part i's slice, so its full parameter may be released (ZeRO-3).
  void keep_own(size_t i);
  /// Moves a sharded part's kept slice to the disk tier.
  void offload_own(size_t i);
  /// Copies every master into its own slice (after masters were loaded).
  void masters_to_own();
  /// The model's state with this rank's master chunks (flat regions of their tensors; an
  /// offloaded one read from the disk tier only while a checkpoint writes or fills it) in
  /// place of the partitioned parameters; without masters, the state as given.
  ShardedState substitute(ShardedState state) const;

 private:
  Layout& layout_;
  DType working_;
  bool master_weights_;
  std::shared_ptr<OffloadStore> store_;
  std::vector<Shard> shards_;
};

}  // namespace booster::zero
