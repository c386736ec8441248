// Collectives built from point-to-point messages, for where Open MPI's non-blocking ones
// are slow: a ring reduce-scatter whose rounds advance whenever its Work is tested or
// waited on, so it overlaps the backward that tests it.
#pragma once

#include "core/dist/collectives.h"

namespace booster::dist {

/// output = this rank's block of op(input) over the group, for floating tensors (f32
/// accumulation). n - 1 rounds: in round s rank r sends block (r - s - 1) mod n to the next
/// rank and adds the block (r - s - 2) mod n it receives from the previous one, so after
/// the last round it holds the reduction of block r; each rank moves (n - 1) / n of input.
WorkPtr ring_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op, const ProcessGroup& g);

}  // namespace booster::dist
