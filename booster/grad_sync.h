// GradSync: the one interface of a data-parallel gradient synchronization (DDP's bucketed
// all-reduce, ZeRO's bucketed reduce-scatter). Backward drives it: the parameters' gradient
// hooks launch buckets as they become ready, and the first of them queues finish() on the
// autograd engine (autograd::queue_callback), so any backward (booster.backward, a plain
// loss.backward(), a pipeline stage's backward_by_grad) ends with synchronized gradients and
// no caller has to finish anything. The model wrapper that owns one exposes it
// (ModelWrapper::grad_sync); no_sync scopes and pipeline schedules use it through this
// interface only.
#pragma once

namespace booster {

class GradSync {
 public:
  virtual ~GradSync() = default;
  /// The user's no_sync scope: while on, gradients accumulate over backwards and the next
  /// synchronized backward reduces their sum (what each implementation keeps meanwhile is
  /// its own: DDP's full gradients, ZeRO-2's partitioned ones).
  virtual void set_no_sync(bool on) = 0;
  virtual bool no_sync() const = 0;
  /// Whether the next synchronization reduces what accumulated (false while no_sync keeps
  /// full gradients accumulating: DDP, ZeRO-1; ZeRO-2 reduces every backward into its
  /// partitioned sums, no_sync or not).
  virtual bool reduces_now() const = 0;
  /// The plugin's deferral (a pipeline stage's micro-batches): while on, backward sends
  /// nothing and full gradients accumulate locally; sync_accumulated() reduces them once.
  virtual void set_defer(bool on) = 0;
  /// Reduces what accumulated while deferred, as one backward would have (nothing under
  /// no_sync where the implementation keeps accumulating).
  virtual void sync_accumulated() = 0;
  /// Completes the current backward's reduction (launches what is left, waits, writes the
  /// results); nothing when none is in progress. Backward calls it by itself.
  virtual void finish() = 0;
  /// Seconds finish() spent waiting on communication since the last reset (the part of the
  /// reduction that did not overlap backward).
  virtual double wait_seconds() const = 0;
  virtual void reset_wait_seconds() = 0;
};

/// Defers a GradSync for a scope (a pipeline step), then reduces what accumulated, also
/// when the scope ends by an exception (deferral is never left on).
class DeferredSync {
 public:
  explicit DeferredSync(GradSync* sync) : sync_(sync) {
    if (sync_) sync_->set_defer(true);
  }
  ~DeferredSync() {
    if (sync_) sync_->set_defer(false);
  }
  DeferredSync(const DeferredSync&) = delete;
  DeferredSync& operator=(const DeferredSync&) = delete;
  /// Ends the deferral and reduces the accumulated gradients.
  void sync() {
    if (!sync_) return;
    GradSync* s = sync_;
    sync_ = nullptr;
    s->set_defer(false);
    s->sync_accumulated();
  }

 private:
  GradSync* sync_;
};

}  // namespace booster
