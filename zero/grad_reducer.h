// GradReducer: a ZeRO rank's gradients, the reduce-scatter driver. The layout's buckets are
// reduce-scattered (averaged over the dp group) so that each rank receives its chunk of
// every gradient. With overlap_communication a bucket is launched from the gradient hooks
// as soon as backward has finished all its parameters, in bucket order on every rank;
// otherwise, once backward is done: the first ready parameter queues finish() on the
// autograd engine, which runs when the backward's graph is done.
//   Stage 2: a launched bucket frees its full gradients; the chunks accumulate in fp32
//   buffers (gradient memory / dp). Under no_sync the buckets are still reduced, into the
//   chunks, so memory stays partitioned while micro-batches accumulate.
//   A launched bucket of a sharded (ZeRO-3) bucket releases its parameters (Gemini).
//   A part whose parameter slice lives on the disk tier (Gemini) keeps its chunk there
//   too: written behind once reduced, its finiteness and sum of squares noted on the way
//   (so the overflow check and clipping read no disk), read back for the update.
//   Stage 1: full gradients stay (working dtype); each rank's chunk of the average is
//   written into its own slice of them. Under no_sync nothing is sent: the full gradients
//   accumulate locally and are reduced by the next synchronized backward. A second
//   backward before the step first settles the averaged ones (its own slice times dp, the
//   other slices, already counted, zeroed: what a sum of this rank's gradients would be),
//   so the next average adds exactly its own; no memory beyond the full gradients.
#pragma once

#include <chrono>

#include "booster/grad_sync.h"
#include "core/common/hook_handle.h"
#include "zero/gatherer.h"

namespace booster::zero {

class GradReducer : public GradSync {
 public:
  /// comm_dtype: the dtype gradients travel in (the working dtype when undefined-like f32
  /// for fp32 training).
  GradReducer(Layout& layout, ShardStore& shards, Gatherer& gatherer, int stage, bool overlap, DType comm_dtype);

  int stage() const { return stage_; }
  void set_no_sync(bool on) override { no_sync_ = on; }
  /// While on, nothing is sent in either stage: full gradients accumulate locally (a
  /// pipeline stage's micro-batches), and sync_accumulated() reduces them once.
  void set_defer(bool on) override { defer_ = on; }
  /// Reduces the gradients accumulated so far into the chunks, as a backward would have
  /// (nothing in stage 1 under no_sync: they keep accumulating).
  void sync_accumulated() override;
  bool no_sync() const override { return no_sync_; }
  bool reduces_now() const override { return !(stage_ == 1 && no_sync_); }
  /// Finishes the current backward's reduction (launches what is left, waits, writes the
  /// chunks). Parameters that received no gradient count as zero.
  void finish() override;
  /// This rank's chunk of part i's averaged gradient ([n]; fp32 in stage 2, the working
  /// dtype in stage 1), or undefined when it has none yet or it is on the disk tier.
  Tensor chunk(size_t i) const;
  /// Whether part i's chunk lives on the disk tier (read it with fetch / release).
  bool on_disk(size_t i) const { return slot_.at(i) >= 0; }
  /// Its slot on the disk tier (-1 before its first gradient or when in RAM).
  int64_t slot(size_t i) const { return slot_.at(i); }
  /// Whether part i has a gradient chunk (in RAM or on disk).
  bool has(size_t i) const { return on_disk(i) ? has_.at(i) : chunk(i).defined(); }
  /// Part i's chunk in RAM wherever it lives (undefined when it has none): a chunk on the
  /// disk tier is read (prefetch starts that) and stays until release; one in RAM is chunk(i).
  Tensor fetch(size_t i) const;
  void prefetch(size_t i) const;
  void release(size_t i, bool dirty) const;
  /// What was noted of a chunk on the disk tier when it was written.
  struct Noted {
    bool finite = true;
    double sum_squares = 0;
  };
  const Noted& noted(size_t i) const { return noted_.at(i); }
  /// Notes a disk chunk changed in RAM (clip by value) before its release.
  void renote(size_t i, const Tensor& chunk);
  /// At most n buckets in flight (0: no bound): launching one more first completes the
  /// oldest, so its staging and output buffers go (Gemini bounds its transient memory).
  void set_max_inflight(size_t n) { max_inflight_ = n; }
  /// Follows the layout's buckets after Gatherer::rebucket (between steps).
  void rebucket();
  /// Clears the gradients (full and chunks).
  void zero();
  /// Seconds finish() spent waiting on communication since the last reset.
  double wait_seconds() const override { return wait_s_; }
  void reset_wait_seconds() override { wait_s_ = 0; }

 private:
  struct Bucket {
    Tensor out;  // this rank's chunks of the bucket's parameters, comm dtype
    dist::WorkPtr work;
    size_t ready = 0;
  };
  void on_ready(size_t part);
  void launch(size_t bucket);
  void launch_ready_in_order();
  void complete(size_t bucket);
  /// Stage 1: part i's full gradient holds an average in its own slice (a reduction
  /// completed since zero()): turns it back into what this rank's sum would be.
  void settle(size_t part);
  /// Waits for the oldest bucket in flight and completes it.
  void complete_oldest();

  Layout& layout_;
  ShardStore& shards_;
  Gatherer& gatherer_;
  int stage_;
  bool overlap_, no_sync_ = false, defer_ = false, started_ = false;
  DType comm_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  std::vector<Tensor> chunks_;  // stage 2: fp32 [n] per part
  std::vector<int64_t> slot_;   // its slot on the disk tier, or -1
  std::vector<bool> has_;       // a disk chunk holds this step's gradient
  std::vector<bool> averaged_;  // stage 1: the own slice holds an average (settle before adding)
  std::vector<Noted> noted_;
  size_t next_launch_ = 0, next_complete_ = 0, max_inflight_ = 0;
  double wait_s_ = 0;
  std::vector<HookHandle> hooks_;  // last: removed before anything they point at
};

}  // namespace booster::zero
