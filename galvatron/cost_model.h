// Galvatron's cost model for this runtime: a plan's step time and each rank's peak memory
// from the hardware and model profiles. It models what GalvatronPlugin does, not what
// Galvatron's PyTorch runtime does:
//   time, per stage and micro-batch: each layer's forward f_t * rows (profiled per
//   tensor-parallel degree, its tensor-parallel traffic included; a Ulysses layer's per
//   Ulysses degree, its all-to-alls included), backward twice that
//   (plus a forward when checkpointed), the moves between layouts, ZeRO-3's gathers; the
//   pipeline's fill and drain (sum of stages + (m - 1) x the slowest); then the gradient
//   synchronization after the last backward (all-reduce for DDP, reduce-scatter for ZeRO)
//   with the overlap coefficient against that backward.
//   memory, per rank of a stage, at its peak (the end of the forward): model states by kind
//   (one ZeRO engine: working copy, fp32 master and two optimizer states a parameter, split
//   by tp and, for ZeRO, by dp; a Ulysses layer's whole, ZeRO over the stage), activations times the micro-batches in flight (min(p - k, m) for 1F1B,
//   m for GPipe: Galvatron's older runtime counted 1), checkpointed layers their input,
//   the largest transient (a fetched ZeRO-3 layer, a layer's full gradient), the
//   embeddings and head, and the runtime's own memory; or, where larger, the end of the
//   backward (every layer's gradient staged for its reduction with the ring's other buffer,
//   all in flight until the backward ends; a checkpointed layer's recompute) or the
//   optimizer step (its temporaries).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "galvatron/plan.h"
#include "galvatron/profiles.h"

namespace booster::galvatron {

/// A rank's memory by part (MB): its parameters (working copies, fetched ZeRO-3 layers
/// included), gradients, fp32 masters, optimizer states, activations, buffers (the runtime's
/// own, the optimizer step's temporaries) and communication (the reductions' other buffers).
struct MemoryParts {
  double params = 0, grads = 0, masters = 0, optimizer = 0, activations = 0, buffers = 0, communication = 0;
  double total() const { return params + grads + masters + optimizer + activations + buffers + communication; }
  MemoryParts& operator+=(const MemoryParts& o);
  MemoryParts operator+(const MemoryParts& o) const { return MemoryParts(*this) += o; }
  MemoryParts operator*(double k) const;
  /// The parts' names and values in print order.
  std::vector<std::pair<const char*, double>> named() const;
};

struct StageCost {
  double fwd_bwd_ms = 0;  // one micro-batch through the stage, forward and backward
  double last_bwd_ms = 0; // the last micro-batch's backward (what the gradient sync overlaps)
  double sync_ms = 0;     // the gradient synchronization after it
  double optimizer_ms = 0;  // the optimizer step of what the rank holds
  double memory_mb = 0;   // a rank's peak
  double backward_mb = 0; // the peak within the backward (part of memory_mb's maximum)
  MemoryParts parts;      // memory_mb by part
  const char* peak_at = "";  // where the peak is: "forward", "backward" or "optimizer step"
};

struct PlanCost {
  double step_ms = 0;
  double memory_mb = 0;  // the largest over stages
  std::vector<StageCost> stages;
};

class CostModel {
 public:
  CostModel(HardwareProfile hw, ModelProfile model, int world, std::string precision);
  /// The step time and peak memory of a plan at its global batch.
  PlanCost cost(const HybridPlan& plan) const;
  /// One layer's time for one micro-batch of `rows` stage rows (forward, backward, ZeRO-3
  /// gathers) and its share of the gradient sync, under stage size `stage`.
  double layer_ms(const HybridPlan& plan, const LayerStrategy& s, int stage, double rows, double* sync_ms) const;
  /// One layer's model states on a rank (MB) and its activations for one micro-batch of `rows`.
  double layer_states_mb(const HybridPlan& plan, const LayerStrategy& s, int stage) const;
  MemoryParts layer_states(const HybridPlan& plan, const LayerStrategy& s, int stage) const;
  double layer_act_mb(const LayerStrategy& s, int stage, double rows) const;
  /// Moving a micro-batch's activations between two layers' layouts (forward and backward):
  /// the rows between groups, and the tokens gathered where a run of token-split layers of
  /// one group ends (its layers hand them on split). The embeddings' side is `edge(plan)`.
  double switch_ms(const LayerStrategy& from, const LayerStrategy& to, int stage, double rows) const;
  static LayerStrategy edge(const HybridPlan& plan) { return LayerStrategy{plan.vtp}; }

  /// ZeRO-3 gathers at least `params` parameters at once (a Gemini chunk, an FSDP unit
  /// holding several layers or the whole model; 0: a layer, as GalvatronPlugin buckets them).
  void set_zero3_unit(double params) { zero3_unit_ = params; }
  /// Data-parallel (DDP) layers reduce through ddp::Reducer's buckets (torch_ddp, FSDP's
  /// NO_SHARD, HybridParallel's zero_stage 0), not the ZeRO engine's (GalvatronPlugin): the
  /// buckets stay allocated between steps (a copy of the gradients in the working
  /// precision, on any data-parallel degree), and the fp32 masters exist only under mixed
  /// precision (the ZeRO engine keeps them in fp32 too).
  void set_ddp_buckets(bool on) { ddp_buckets_ = on; }
  /// The ZeRO-2 layers run ZeRO stage 1 (LowLevelZero's stage 1, HybridParallel's
  /// zero_stage 1): each keeps its whole gradient in the working precision beside the copy
  /// its reduction sends (the reduction assumed in flight until the backward ends, as for
  /// stage 2: an upper bound when the network keeps up with the backward).
  void set_zero1(bool on) { zero1_ = on; }

  const ModelProfile& model() const { return model_; }
  const HardwareProfile& hardware() const { return hw_; }
  int world() const { return world_; }

 private:
  /// A parameter's model states at the peak, bytes by part.
  MemoryParts states_per_param(DpKind kind, int dp) const;
  /// A gradient of `params` parameters (`mb` MB) as the backward leaves it: staged for its
  /// reduction over `dp` ranks, the reduction's buffers, and under stage 1 its own copy.
  MemoryParts staged_grad_mb(double mb, double params, int dp, DpKind kind) const;
  /// What a layer's weights are split into (its tp; whole under Ulysses) and the ranks its
  /// gradients are reduced over (stage / tp; the whole stage under Ulysses).
  static int weight_split(const LayerStrategy& s);
  static int grad_group(const LayerStrategy& s, int stage);
  /// A checkpointed layer's backward working set, MB a sample of its rows.
  double checkpoint_backward_mb(const LayerStrategy& s) const;
  /// One layer's memory on a rank for one micro-batch (MB): what its forward leaves (a
  /// checkpointed layer: its input), its gradient as the backward leaves it (staged, with
  /// the reduction's buffers) and alone, and what its backward holds beyond the rest (a checkpointed
  /// layer: the recompute, profiled; else its activations and gradient on the way, or a
  /// fetched ZeRO-3 layer).
  struct LayerMemory {
    double act = 0, whole = 0;  // whole: its gradient alone
    MemoryParts grad, work;
  };
  /// Layer s's memory on a rank of a `stage`-rank stage for a micro-batch of `rows` stage
  /// rows, and in `held_now` what it adds at the forward's end (a fetched ZeRO-3 unit, at
  /// most `stage_params` parameters, else its gradient).
  LayerMemory layer_memory(const HybridPlan& plan, const LayerStrategy& s, int stage, double rows, double stage_params,
                           MemoryParts& held_now) const;
  /// The backward's peak over a stage's layers (in forward order), beside `held` MB of other
  /// activations and `grads` MB of gradients staged from the start (the embeddings' and
  /// head's).
  static MemoryParts backward_peak(const std::vector<LayerMemory>& layers, double held, MemoryParts grads);
  /// What a stage holds (MB): its layers', and its totals with the embeddings' and head's share.
  struct StageMemory {
    std::vector<LayerMemory> layers;
    MemoryParts states, other_grads, grads, transient;
    double acts = 0, other_acts = 0, updated = 0;
  };
  /// Sets sc's peak and backward peak; m: the pipeline's micro-batches (0: no pipeline).
  void peak_memory(StageCost& sc, StageMemory s, int64_t in_flight, int64_t m, bool gpipe) const;
  HardwareProfile hw_;
  ModelProfile model_;
  int world_;
  double beta_;  // bytes of the working precision
  double zero3_unit_ = 0;  // parameters a ZeRO-3 gather fetches at once (0: a layer)
  bool ddp_buckets_ = false;  // DDP layers reduce through ddp::Reducer's buckets
  bool zero1_ = false;        // the ZeRO-2 layers are stage 1
};

}  // namespace booster::galvatron
