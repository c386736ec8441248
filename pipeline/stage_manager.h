// PipelineStageManager (Colossal-AI's): which stage this rank is among the ranks of its
// pipeline group, its neighbours (wrapping around, so the last stage's chunk c feeds the
// first stage's chunk c + 1 when interleaved), and which layers each stage's model chunk
// runs. Stage s's chunk c is slot s + c*S of the S*C slots the layers are distributed over.
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
                       std::vector<int64_t> num_layers_per_stage = {});

  int stage() const { return pp_.rank(); }
  int num_stages() const { return pp_.size(); }
  int num_model_chunks() const { return chunks_; }
  const dist::ProcessGroup& group() const { return pp_; }
  /// The world rank of the previous / next stage (wrapping around).
  int prev_rank() const;
  int next_rank() const;
  /// Whether this stage's chunk (or, with chunk < 0, the stage whatever its chunks: stage 0 /
  /// S-1) holds the model's first / last slot.
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
  const dist::ProcessGroup& pp_;
  int chunks_;
  std::vector<int64_t> per_slot_;
};

/// Layers per part for `parts` contiguous parts of layers weighing `weights` (parameter
/// counts), minimizing the heaviest part (legacy Colossal-AI's balanced partition); every
/// part gets at least one layer.
std::vector<int64_t> partition_balanced(const std::vector<int64_t>& weights, int parts);

}  // namespace booster::pipeline
