// Galvatron's search: for every pipeline degree, vocab degree (tensor parallel or Ulysses:
// vsp) and micro-batch count, a knapsack dynamic program over each stage's layers and
// integer memory (Galvatron's DpOnModel) picks every layer's strategy (tensor-parallel or
// Ulysses degree and consecutiveness, DDP / ZeRO-3, checkpointing) to minimize the stage's
// time under the memory budget, with the cost of moving activations between layouts as the
// switch cost; each stage plan is then scored whole by the cost model, and the fastest plan
// that fits is the result. Unlike Galvatron, which fixes the stage partition first,
// partitions near the even split are searched too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "galvatron/cost_model.h"

namespace booster::galvatron {

struct SearchOptions {
  int64_t num_layers = 0;
  double memory_mb = 0;      // a rank's budget
  int64_t global_bsz = 0;
  int max_tp = 0;            // 0: up to a stage
  int max_pp = 0;            // 0: up to the world
  int max_chunks = 8;
  bool checkpoint = true;    // consider checkpointed layers
  bool sdp = true;           // consider ZeRO-3 layers
  bool tp_consec_off = true; // consider strided tensor-parallel groups
  bool vtp = true;           // consider vocab degrees above 1
  std::string sp_space = "tp";  // Galvatron's --sp_space: tp, sp (Ulysses instead) or tp+sp (both) at degrees > 1
  std::string default_dp_type = "ddp";
  std::string pipeline_type = "pipedream_flush";
  double memory_step_mb = 0;  // knapsack granularity (0: budget / 2048)
  int64_t partition_spread = 2;  // stage partitions weighed: each stage within this many layers of the even split
};

struct Candidate {
  HybridPlan plan;
  PlanCost cost;
  bool fits = false;
};

/// Every layer strategy of a stage of `stage` ranks the options allow.
std::vector<LayerStrategy> strategies(int stage, const SearchOptions& o);
/// The layerwise search: every candidate weighed (one a pipeline degree, vocab degree and
/// micro-batch count that has a feasible plan), fastest first.
std::vector<Candidate> search(const CostModel& cm, const SearchOptions& o);
/// Every global plan (one strategy for all layers) the options allow, scored, fastest first.
std::vector<Candidate> global_plans(const CostModel& cm, const SearchOptions& o);

}  // namespace booster::galvatron
