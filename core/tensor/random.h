// Seeded, counter-based random numbers: element i of a draw depends only on (seed,
// stream, counter + i), so results are identical for any thread count, and each rank
// draws from its own stream. The state is three integers, saved in checkpoints.
#pragma once

#include <cstdint>

#include "core/tensor/region.h"
#include "core/tensor/tensor.h"

namespace booster {

/// A generator's complete state.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t counter = 0;
};

/// One draw of a distribution over a tensor: element i of the tensor's row-major order
/// depends only on (seed, stream, first counter + i), so any part of it can be made alone
/// (a lazily initialized parameter makes only the slice or shard its rank keeps).
struct Draw {
  enum class Kind { uniform, normal, trunc_normal, bernoulli };
  Kind kind = Kind::uniform;
  double p0 = 0, p1 = 0, p2 = 0, p3 = 0;  // uniform [p0, p1); normal (mean p0, std p1); trunc_normal
                                          // (mean, std, lo, hi); bernoulli (p0)
  GeneratorState at;                      // the generator's state when the draw began
};

/// Writes the draw's values for the runs of the logical tensor into `local` (contiguous,
/// floating: the runs' local positions index its row-major order).
void fill_draw(Tensor& local, const Draw& d, const std::vector<Run>& runs);

/// Counter-based random generator (splitmix64 over a per-stream key).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) { manual_seed(seed, stream); }
  /// Restarts the generator at (seed, stream).
  void manual_seed(uint64_t seed, uint64_t stream = 0);
  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& s) { state_ = s; }

  /// Next raw 64-bit value.
  uint64_t next_u64();
  /// Next double in [0, 1).
  double next_double();
  /// Reserves n consecutive counters and returns the first (for parallel fills).
  uint64_t advance(uint64_t n) {
    uint64_t c = state_.counter;
    state_.counter += n;
    return c;
  }
  /// Raw value at an absolute counter position.
  uint64_t at(uint64_t counter) const;

  /// Fills t with U[lo, hi).
  void uniform_(Tensor& t, double lo = 0.0, double hi = 1.0);
  /// Fills t with N(mean, std^2).
  void normal_(Tensor& t, double mean = 0.0, double std = 1.0);
  /// Fills t with N(mean, std^2) truncated to [a, b] (absolute bounds, as PyTorch's trunc_normal_).
  void trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);
  /// Fills t with 1 with probability p, else 0.
  void bernoulli_(Tensor& t, double p);
  /// Reserves the counters of a draw over numel elements and returns it (the fills above
  /// are this and fill_draw; a lazy tensor keeps the draw instead of filling).
  Draw reserve(Draw::Kind kind, int64_t numel, double p0 = 0, double p1 = 0, double p2 = 0, double p3 = 0);

 private:
  GeneratorState state_;
  uint64_t key_ = 0;
};

/// The process-wide default generator (seeded by manual_seed), or this thread's while a
/// DefaultGeneratorGuard is alive on it.
Generator& default_generator();

/// Makes default_generator() return `g` on this thread while alive: threads that each run a
/// share of a batch at once (nn::split_batch) draw their dropout masks from their own.
class DefaultGeneratorGuard {
 public:
  explicit DefaultGeneratorGuard(Generator& g);
  ~DefaultGeneratorGuard();
  DefaultGeneratorGuard(const DefaultGeneratorGuard&) = delete;
  DefaultGeneratorGuard& operator=(const DefaultGeneratorGuard&) = delete;

 private:
  Generator* prev_;
};
/// Seeds the default generator; `stream` is usually the rank.
void manual_seed(uint64_t seed, uint64_t stream = 0);

/// Inverse error function, accurate to double rounding.
double erfinv(double x);

}  // namespace booster
