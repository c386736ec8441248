// DDP's gradient reducer (ZeRO stage 0: nothing partitioned, gradients all-reduced): parameters grouped into buckets of at most bucket_cap_mb in
// reverse registration order (the order backward finishes them), one dtype per bucket
// (the parameters', as PyTorch's: bf16 working copies give bf16 buckets); each parameter's
// post-accumulate hook marks it ready, and a bucket whose parameters are all ready is
// copied into its flat buffer and all-reduced (averaged) asynchronously, in bucket order,
// while backward continues; the first ready parameter queues finish() on the autograd
// engine, which waits and writes the averages back once the backward is done.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "booster/grad_sync.h"
#include "core/dist/collectives.h"
#include "optim/optimizer.h"

namespace booster::ddp {

struct ReducerOptions {
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  std::string owner = "TorchDDPPlugin";  // who errors name
};

class Reducer : public GradSync {
 public:
  /// `params` in registration order; hooks are registered on each and removed when the
  /// reducer is destroyed (a model boosted again gets a fresh reducer, not two).
  Reducer(const optim::NamedParams& params, const dist::ProcessGroup& group, ReducerOptions opts);
  /// Under no_sync (or deferred) full gradients accumulate locally.
  void set_no_sync(bool on) override { no_sync_ = on; }
  bool no_sync() const override { return no_sync_; }
  bool reduces_now() const override { return !no_sync_; }
  void set_defer(bool on) override { defer_ = on; }
  /// Waits for every bucket of the current backward and writes averaged gradients back.
  /// Buckets not launched (parameters without gradient) are an error naming them unless
  /// find_unused_parameters, in which case their missing gradients count as zero.
  void finish() override;
  /// Averages the gradients accumulated so far (every parameter; one without a gradient
  /// counts as zero) and writes them back. Nothing under no_sync (they keep accumulating).
  void sync_accumulated() override;
  /// True when a backward has launched communication that finish() has not collected.
  bool pending() const { return started_; }
  /// Buckets, assigned at the first backward (0 before it).
  size_t num_buckets() const { return buckets_.size(); }
  /// Bucket i's dtype: its parameters' at the first backward.
  DType bucket_dtype(size_t i) const { return buckets_.at(i).flat.dtype(); }
  /// Seconds finish() spent waiting on all-reduce since the last reset.
  double wait_seconds() const override { return wait_s_; }
  void reset_wait_seconds() override { wait_s_ = 0; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor flat;                 // its parameters' gradients side by side, in their dtype
    size_t ready = 0;
    dist::WorkPtr work;
  };
  void assign_buckets();
  void on_ready(size_t param_index);
  void launch(Bucket& b);
  void launch_ready_in_order();

  optim::NamedParams params_;
  const dist::ProcessGroup& group_;
  ReducerOptions opts_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, offset_of_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool started_ = false, no_sync_ = false, defer_ = false;
  double wait_s_ = 0;
  std::vector<HookHandle> hooks_;  // last: removed before anything they point at
};

}  // namespace booster::ddp
