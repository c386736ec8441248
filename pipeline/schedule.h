// Pipeline schedules (Colossal-AI's OneForwardOneBackwardSchedule and InterleavedSchedule).
// Every stage pulls the whole batch from the data iterator (the first stage needs the
// inputs, the last the labels) and cuts it into micro-batches along dim 0. A schedule is
// the order in which a stage runs forward (F) and backward (B) passes of its model chunks
// on the micro-batches; one executor runs any order:
//   1F1B: S - s - 1 warm-up forwards, then one forward one backward, then the remaining
//   backwards, so at most S micro-batches are in flight on a stage.
//   Interleaved (C model chunks per stage, slot s + c*S): forward k runs chunk
//   (k mod SC) / S on micro-batch (k / SC) * S + k mod S (backward: the chunks reversed),
//   2(S - s - 1) + (C - 1) S warm-up forwards.
//   Zero bubble V (zero_bubble.h): two chunks in a V, backwards split into B and W.
// The last slot's loss is criterion(outputs, micro_batch) / M, backward through
// optimizer.backward (loss-scaled); the other stages call optimizer.backward_by_grad with
// what the next stage sent. The model's data-parallel gradient synchronization (its
// GradSync) is deferred over the micro-batches and runs once after the last.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "booster/boosted_objects.h"
#include "pipeline/p2p.h"

namespace booster::pipeline {

struct ScheduleOptions {
  int64_t num_microbatches = 0;  // 0: from microbatch_size (both: a training batch must be their product)
  int64_t microbatch_size = 0;   // 0: from num_microbatches (both: micro-batches of this size)
  bool enable_metadata_cache = true;
  bool overlap_p2p = true;
  /// Every micro-batch's rows must be a multiple of this (a tensor-parallel grid's row
  /// blocks), checked on every stage before any message moves; `rows_owner` names the grid.
  int64_t rows_multiple = 1;
  std::string rows_owner;
};

/// What the last forward_backward_step measured on this stage.
struct PipelineStepStats {
  int64_t microbatches = 0;
  double seconds = 0;          // the whole step
  double wait_seconds = 0;     // waiting for other stages' messages (the bubble, and transfers)
  double sync_seconds = 0;     // the data-parallel gradient synchronization after the last backward
  int peak_in_flight = 0;      // micro-batches forwarded and not yet backwarded, at most
  size_t peak_activation_bytes = 0;  // what those micro-batches' forwards held, at most
  size_t message_bytes = 0;  // the largest message a forward sent to the next stage
};

class PipelineSchedule {
 public:
  PipelineSchedule(const PipelineStageManager& stages, ScheduleOptions opts);
  virtual ~PipelineSchedule() = default;
  /// One step over a batch of data_iter: training (forward and backward of every
  /// micro-batch) when gradients are enabled, forward only otherwise (a ragged last
  /// micro-batch allowed). Loss and outputs are set on the last stage only.
  PipelineResult forward_backward_step(ModelWrapper& model, const DataIter& data_iter, const StageCriterion& criterion,
                                       OptimizerWrapper* optimizer, bool return_loss, bool return_outputs);
  const PipelineStepStats& last_step_stats() const { return stats_; }

  /// A backward whole, or split as zero bubble runs it: B (the inputs' gradients, which the
  /// previous slot waits for) and W later (the weights' gradients; weight_grad_store.h).
  enum class Part : uint8_t { whole, input, weight };
  struct Op {
    bool forward;
    int chunk;
    int64_t microbatch;
    Part part = Part::whole;  // backward ops only
  };
  /// A pass the last step ran on this stage, and its seconds (waiting for messages excluded).
  struct PassTime {
    Op op;
    double seconds;
  };
  /// This stage's order of passes over m micro-batches.
  virtual std::vector<Op> order(int64_t m, bool forward_only) const = 0;
  /// The schedule's own checks of the number of micro-batches (training).
  virtual void check_microbatches(int64_t m) const;

 protected:
  /// Sums the gradients of the model's tied parameters (PipelineModule::tied_parameters)
  /// over the first and the last stage (when the step's synchronization reduces them: not while no_sync accumulates).
  void sum_tied_gradients(ModelWrapper& model);
  /// Called on every stage after each step with the passes it ran, in order.
  virtual void after_step(const std::vector<PassTime>& /*passes*/) {}
  const PipelineStageManager& sm_;
  ScheduleOptions opts_;
  PipelineP2P p2p_;
  PipelineStepStats stats_;
  dist::GroupPtr tied_;  // the first and the last stage (of this pipeline group)
};

class OneForwardOneBackwardSchedule : public PipelineSchedule {
 public:
  using PipelineSchedule::PipelineSchedule;
  std::vector<Op> order(int64_t m, bool forward_only) const override;
};

/// GPipe (Galvatron's "gpipe"): every micro-batch forward, then every backward, so all m
/// micro-batches are in flight on every stage (1F1B holds at most S - s).
class GPipeSchedule : public PipelineSchedule {
 public:
  using PipelineSchedule::PipelineSchedule;
  std::vector<Op> order(int64_t m, bool forward_only) const override;
};

class InterleavedSchedule : public PipelineSchedule {
 public:
  using PipelineSchedule::PipelineSchedule;
  std::vector<Op> order(int64_t m, bool forward_only) const override;
  void check_microbatches(int64_t m) const override;
};

/// Keeps what this stage holds (the layers of its model chunks and, on the first / last
/// stage, the input / output modules): every other parameter and buffer is released
/// (undefined, so it leaves named_parameters() and state_dict()) and leaves the optimizer. A
/// model that refuses one of the slots (stage_modules throws) refuses on every rank.
void keep_stage_modules(nn::Module& model, const nn::PipelineModule& pm, const PipelineStageManager& stages,
                        OptimizerWrapper* optimizer);

/// The model's tied parameters (PipelineModule::tied_parameters) this stage holds when it is
/// not the first: the ones another stage counts in a norm.
std::vector<Tensor> tied_copies(nn::Module& model, const nn::PipelineModule& pm, const PipelineStageManager& stages);

/// The micro-batch sizes of a batch of `batch` rows (training: it must divide evenly).
std::vector<int64_t> microbatch_sizes(int64_t batch, const ScheduleOptions& o, bool training);

}  // namespace booster::pipeline
