// Zero bubble's V schedule (Qi et al., "Pipeline Parallelism with Controllable Memory";
// Colossal-AI's ZeroBubbleVPipeScheduler, pp_style "zbv"): two model chunks a stage in the V
// placement (stage_manager.h), each backward split into B and W (weight_grad_store.h), and an
// order found by simulating the pipeline on the passes' costs: each stage, when free, runs a
// backward B that is ready, else a forward that is ready (chunk 0's only while fewer than the
// memory limit of micro-batch chunks are held), else a pending W, which so fills the time the
// stage would wait; the Ws left run at the end. The costs are measured, not given: the first
// step runs on equal costs and times every pass; the stages agree on the mean of their
// medians, and on a message's time (the step's largest forward message sent back and forth
// between neighbouring stages after it); the steps after it run the order simulated from
// those (recorded with the optimizer's state, so a resumed run steps in the same order).
#pragma once

#include <optional>

#include "booster/optimizer_wrapper.h"
#include "pipeline/schedule.h"

namespace booster::pipeline {

/// Seconds of one pass of one model chunk over one micro-batch, and of one message between stages.
struct ZeroBubbleCosts {
  double f = 1, b = 1, w = 1, comm = 0;
  bool operator==(const ZeroBubbleCosts&) const = default;
};

/// The simulated order of every stage of S (orders[s]) over m micro-batches, holding at most
/// `max_in_flight` micro-batch chunks' activations before chunk 1 forwards (2 S: 1F1B's
/// memory, each chunk holding half a stage's layers); `makespan` receives the simulated step time.
std::vector<std::vector<PipelineSchedule::Op>> zero_bubble_v_orders(int S, int64_t m, const ZeroBubbleCosts& c,
                                                                     int64_t max_in_flight, double* makespan = nullptr);

class ZeroBubbleVSchedule : public PipelineSchedule {
 public:
  using PipelineSchedule::PipelineSchedule;
  std::vector<Op> order(int64_t m, bool forward_only) const override;
  /// The costs the orders come from: measured on the first training step (agreed by the
  /// stages), or set from a checkpoint; nullopt before.
  const std::optional<ZeroBubbleCosts>& costs() const { return costs_; }
  void set_costs(const ZeroBubbleCosts& c) { costs_ = c; }

 protected:
  void after_step(const std::vector<PassTime>& passes) override;

 private:
  /// One message's seconds between neighbouring stages (a collective over the stages).
  double message_seconds() const;
  std::optional<ZeroBubbleCosts> costs_;
};

}  // namespace booster::pipeline

namespace booster::pipeline {

/// Keeps a zero bubble schedule's measured costs with the optimizer's state (its `extra`, as
/// "zbv_cost_f", "_b", "_w", "_comm"), so a resumed run simulates the same orders and steps
/// (and sums its gradients) as the run it resumes. A checkpoint without them leaves the
/// schedule to measure its own.
class ZeroBubbleCostsState : public OptimizerDecorator {
 public:
  ZeroBubbleCostsState(std::shared_ptr<OptimizerWrapper> inner, ZeroBubbleVSchedule& schedule)
      : OptimizerDecorator(std::move(inner)), schedule_(schedule) {}
  std::string type_name() const override { return "ZeroBubbleCostsState"; }
  optim::OptimizerStateDict state_dict() const override { return with_costs(OptimizerDecorator::state_dict()); }
  optim::OptimizerStateDict local_state_dict() const override {
    return with_costs(OptimizerDecorator::local_state_dict());
  }
  CheckpointShare local_checkpoint_state() const override {
    CheckpointShare share = OptimizerDecorator::local_checkpoint_state();
    share.dict = with_costs(std::move(share.dict));
    return share;
  }
  void load_state_dict(const optim::OptimizerStateDict& sd) override;
  void load_local_state_dict(const optim::OptimizerStateDict& sd) override;

 private:
  optim::OptimizerStateDict with_costs(optim::OptimizerStateDict sd) const;
  void take_costs(const optim::OptimizerStateDict& sd);
  ZeroBubbleVSchedule& schedule_;
};

}  // namespace booster::pipeline
