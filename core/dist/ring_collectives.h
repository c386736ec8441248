// Collectives built from point-to-point messages, for where Open MPI's are slow: a ring
// reduce-scatter and a ring all-reduce whose rounds advance whenever their Work is tested or
// waited on, so they overlap the backward that tests them.
#pragma once

#include "core/dist/collectives.h"

namespace booster::dist {

/// A reduce-scatter round (of both collectives below) moves in pieces of at most this many
/// elements, each added in as it arrives, while in cache, through a receive buffer of one
/// piece (BOOSTER_RING_PIECE overrides it). 512 Ki elements (2 MiB of f32): ViT-B's 344 MB
/// f32 all-reduce on 2 ranks ran 1.3x faster than with whole rounds; pieces of 32 Ki to 2 Mi
/// measured 1.03-1.55x (allreduce_bench).
constexpr int64_t kRingPieceDefault = int64_t(1) << 19;
void set_ring_piece_elements(int64_t n);
int64_t ring_piece_elements();
/// The sums of f32 and bf16 run 16 lanes at a time on CPUs with AVX-512 (on by default);
/// off, they take the portable path every CPU has (for tests on AVX-512 machines).
void set_ring_avx512(bool on);

/// output = this rank's block of op(input) over the group, for floating tensors (f32
/// accumulation). n - 1 rounds: in round s rank r sends block (r - s - 1) mod n to the next
/// rank and adds the block (r - s - 2) mod n it receives from the previous one, so after
/// the last round it holds the reduction of block r; each rank moves (n - 1) / n of input.
/// A bf16/f16 input is not widened whole: round 0 sends its own values, the partial sums
/// of the rounds between (n > 2) move as f32 through one block, and the last round's sum is
/// rounded once into output. The input is untouched unless input_is_scratch (an f32 input
/// then holds the partial sums in place).
WorkPtr ring_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op, const ProcessGroup& g,
                            bool input_is_scratch = false);

/// t = t summed (or averaged) over the group, in place, for floating tensors: a ring
/// reduce-scatter then a ring all-gather over n blocks, 2 (n - 1) rounds that each rank
/// advances whenever the Work is tested or waited on; each rank sends 2 (n - 1) / n of t.
/// Sums accumulate in f32 and every rank ends with the same bits. A bf16/f16 tensor moves
/// in its own dtype where that loses nothing: a rank's own values (the first round) and the
/// results, rounded once (the all-gather); the partial sums of the rounds between (n > 2)
/// move as f32. With 2 ranks the result is (a + b) / 2 rounded once, as through f32 staging.
WorkPtr ring_all_reduce(Tensor& t, ReduceOp op, const ProcessGroup& g);

/// One step round the group's ring, for callers that compute while it moves (ring attention,
/// the ring linears): `mine` goes to the next group rank while the previous one's tensor (of
/// mine's shape and dtype) comes into `incoming`, both started now; wait() before reading it
/// or reusing mine. Tags below kUserTagLimit, one per kind of message of the caller.
struct RingShift {
  Tensor incoming;
  std::vector<WorkPtr> works;
  void wait();
};
RingShift ring_shift(const Tensor& mine, const ProcessGroup& g, int tag);

}  // namespace booster::dist
