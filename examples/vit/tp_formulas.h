// What tensor parallelism should cost a ViT per rank, from the model's shapes alone: the
// parameter bytes each mode keeps and the bytes each moves in a training step (forward and
// backward, fp32, counted as dist::traffic_bytes counts them: a bandwidth-optimal ring).
// Derived from this implementation's schedule (1D: Megatron's all-reduces, q, k, v and
// intermediate each reducing their input gradient; 2D / 2.5D / 3D: each linear's gathers,
// reduce-scatters and replicated-block gradient sums, the layer norms' row statistics, the
// classifier's logits), so vit_benchmark can print measured beside predicted.
#pragma once

#include <string>

#include "nn/vit_config.h"

namespace booster::examples {

struct TpFormula {
  double param_bytes = 0;  // this rank's parameters
  double comm_bytes = 0;   // put on the wire per training step
};

/// mode "1d", "2d", "2.5d" or "3d" over `tp` ranks (depth: 2.5D's), `batch` images per replica.
TpFormula tp_formula(const nn::ViTConfig& c, int64_t batch, const std::string& mode, int tp, int depth = 1);

}  // namespace booster::examples
