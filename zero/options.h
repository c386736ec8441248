// The ZeRO engine's options: Colossal-AI's LowLevelZeroPlugin arguments, the one struct that
// LowLevelZeroPlugin, GeminiPlugin and HybridParallelPlugin embed (each binds them to its
// own config keys: zero_stage and zero_bucket_size_in_m under HybridParallel, ...).
#pragma once

#include <string>

#include "booster/grad_scaler.h"

namespace booster::zero {

struct ZeroOptions {
  int stage = 1;
  std::string precision = "fp16";
  GradScalerOptions scaler{4294967296.0, 1, 2, 0.5, 1000, 2, 4294967296.0};  // initial_scale 2**32, ... as Colossal-AI
  double max_norm = 0.0;                // > 0: every step clips by the global norm
  double norm_type = 2.0;
  double reduce_bucket_size_in_m = 12;  // millions of elements a bucket
  std::string communication_dtype;     // "" (the gradients' dtype), "fp16", "bf16" or "fp32"
  bool overlap_communication = true;
  bool overlap_allgather = false;
  bool cpu_offload = false;             // masters and optimizer states in the disk tier
  std::string offload_dir;              // where the disk tier's file goes ("": default_offload_dir(), the run's)
  double offload_frac = 1.0;            // with cpu_offload: the share of the parameters offloaded
  bool master_weights = true;
  bool cast_inputs = true;

  /// Checks what every plugin accepts alike (precision, communication_dtype, the loss
  /// scale); throws ValueError naming it, after `who`.
  void validate_common(const char* who) const;
};

}  // namespace booster::zero
