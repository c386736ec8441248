// PipelineStageManager (Colossal-AI's): which stage this rank is among the ranks of its
// pipeline group, which of the S*C slots the layers are distributed over each of its model
// chunks runs, and so which stage holds the slot before or after one of its own. Stage s's
// chunk c is slot s + c*S (interleaved: the last stage's chunk c feeds the first stage's
// chunk c + 1), or with use_zbv (two chunks, zero bubble's V shape) slot s for chunk 0 and
// slot 2S-1-s for chunk 1: the layers go down the stages and back up, the last stage's two
// chunks meet, and the first stage holds both the model's first and last slot.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dist/process_group.h"
#include "nn/pipeline.h"

namespace booster::pipeline {

class PipelineStageManager {
 public:
  /// pp: the pipeline group (its rank order is the stage order). num_layers_per_stage: the
  /// layers of each of the S*C slots (empty: distribute_layers' default split).
  PipelineStageManager(const dist::ProcessGroup& pp, int num_model_chunks = 1,
                       std::vector<int64_t> num_layers_per_stage = {}, bool use_zbv = false);

  int stage() const { return pp_.rank(); }
  int num_stages() const { return pp_.size(); }
  int num_model_chunks() const { return chunks_; }
  const dist::ProcessGroup& group() const { return pp_; }
  bool use_zbv() const { return zbv_; }
  /// The slot this stage's chunk runs.
  int slot_of(int chunk) const { return slot_at(stage(), chunk); }
  /// The stage and the chunk that run a slot, and that stage's world rank.
  int stage_of_slot(int slot) const;
  int chunk_of_slot(int slot) const;
  int rank_of_slot(int slot) const { return rank_of_stage(stage_of_slot(slot)); }
  int rank_of_stage(int s) const { return pp_.ranks()[size_t(s)]; }
  /// Whether this stage's chunk (or, with chunk < 0, the stage whatever its chunks: stage 0 /
  /// S-1, or stage 0 for both with use_zbv) holds the model's first / last slot.
  bool is_first_stage(int chunk = -1) const;
  bool is_last_stage(int chunk = -1) const;

  /// Layers per slot (S*C slots): num_layers_per_stage when given (its length and sum are
  /// checked against n), else n // (S*C) each with the n % (S*C) extra layers given to the
  /// slots from (S*C)//2 - r//2 on, as Colossal-AI's distribute_layers.
  std::vector<int64_t> distribute_layers(int64_t n) const;
  /// This stage's chunk of a model of n layers: its layer range and whether it holds the
  /// model's input / output layers.
  nn::StageSpec stage_spec(int64_t n, int chunk = 0) const;
  /// Slot `slot`'s share (stage slot % S, chunk slot / S) of a model of n layers.
  nn::StageSpec slot_spec(int64_t n, int slot) const;
  /// Slots: stages x model chunks.
  int num_slots() const { return num_stages() * chunks_; }

 private:
  int slot_at(int stage, int chunk) const;
  const dist::ProcessGroup& pp_;
  int chunks_;
  bool zbv_;
  std::vector<int64_t> per_slot_;
};

/// Layers per part for `parts` contiguous parts of layers weighing `weights` (parameter
/// counts), minimizing the heaviest part (legacy Colossal-AI's balanced partition); every
/// part gets at least one layer.
std::vector<int64_t> partition_balanced(const std::vector<int64_t>& weights, int parts);

}  // namespace booster::pipeline
