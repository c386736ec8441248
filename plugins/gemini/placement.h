// AutoPlacement: Gemini's placement_policy "auto" (Colossal-AI's AutoPlacementPolicy). The
// fast memory is RAM under a cap; the slow one the disk tier. Every chunk of a rank's model
// states (its parameter slices, gradient shards, fp32 masters, optimizer states) has a
// place on disk; the chunks kept resident are pinned in RAM, the others pass through RAM
// when used (read ahead, written behind). Before the first step, warmup_non_model_data_ratio
// of the cap is reserved for what is not model data; each step then measures that memory
// (the host tier's peak minus the resident states, plus the resident set outside the host
// tier, the largest over the dp group, so every rank places alike) and keeps as many
// chunks resident as fit in steady_cuda_cap_ratio of the cap beside it, moving chunks
// between the tiers between steps. Chunks the forward
// uses first are kept first (a read ahead cannot hide the first chunk's read).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "zero/optimizer.h"

namespace booster::plugins {

/// The cap in bytes: memory_cap_mb when > 0, else BOOSTER_MEMORY_CAP_MB, else the machine's
/// RAM shared by the ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE).
size_t resolve_memory_cap(double memory_cap_mb);

/// Keeps the host tier's footprint (tensors in use and idle cached blocks) under `cap` less
/// what the process holds outside the tier (libraries, MPI, small mallocs); returns that.
size_t limit_host_footprint(size_t cap);

class AutoPlacement : public zero::Placement {
 public:
  struct Stats {
    size_t cap = 0;                 // bytes
    size_t non_model_peak = 0;      // what placement plans for (largest over the dp group)
    size_t last_peak = 0;           // the host tier's peak in the last step, this rank
    size_t untracked = 0;           // resident memory outside the host tier (in non_model_peak)
    size_t resident_bytes = 0;      // model states pinned in RAM now
    size_t model_bytes = 0;         // this rank's model states in all
    size_t resident_chunks = 0, chunks = 0;
    size_t moves_in = 0, moves_out = 0;  // chunk moves so far
    int steps = 0;
  };

  AutoPlacement(zero::Engine& engine, zero::LowLevelZeroOptimizer& opt, size_t cap, double warmup_ratio,
                double steady_ratio);
  /// Lifts the host tier's footprint limit this placement set.
  ~AutoPlacement() override;
  AutoPlacement(const AutoPlacement&) = delete;
  AutoPlacement& operator=(const AutoPlacement&) = delete;
  /// Measures the step just done and places the chunks for the next (every rank of the dp
  /// group calls it after each step).
  void after_step() override;
  const Stats& stats() const { return stats_; }

 private:
  /// Refuses (at boost, on every rank) a cap below one gathered chunk, its step state and
  /// the `untracked` memory the process holds outside its tensors.
  void check_cap_at_boost(size_t untracked) const;
  /// This rank's model-state bytes of chunk b: its slices and masters, and with the step's
  /// state its gradient shards and optimizer states (as planned until they exist).
  size_t chunk_bytes(size_t b, bool with_step_state = true) const;
  /// Whether chunk b's states are pinned in RAM (its parts say).
  bool resident(size_t b) const;
  void set_resident(size_t b, bool on);
  /// Keeps the chunks that fit in `budget` resident, in order of preference.
  void place(double budget);

  zero::Engine& eng_;
  const zero::Layout& layout_;
  zero::LowLevelZeroOptimizer& opt_;
  double warmup_ratio_, steady_ratio_;
  size_t steady_peak_ = 0;
  Stats stats_;
};

}  // namespace booster::plugins
