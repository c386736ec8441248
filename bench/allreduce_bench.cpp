// All-reduce of one DDP bucket (or one tensor-parallel activation): dist::all_reduce
// (averaging; the ring from 64 Ki elements) against MPI_Allreduce measured alternately in
// the same run, bf16 through an f32 staging copy (the path bf16 took before the ring), the
// algorithm bandwidth of each beside the node's memory-copy bandwidth, and the overlap: a
// rank posts the all-reduce, computes matmuls for as long as the all-reduce alone takes
// without entering MPI (as a backward between gradient hooks), then waits; the exposed
// remainder is what the wait adds to the compute, the overlap 1 - exposed / all-reduce. Run
// under mpirun -np N with OMP_NUM_THREADS=1, as DDP's ranks run:
//   mpirun -np 2 allreduce_bench [MB per bucket, default 25] [rounds, default 5] [ring piece, elements]
// The ring's reduce-scatter rounds move in pieces (ring_collectives.h); the same ring with
// whole rounds is measured beside it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "core/dist/collectives.h"
#include "core/dist/ring_collectives.h"
#include "core/kernels/ops.h"
#include "core/dist/runtime.h"
#include "core/kernels/raw.h"
#include "core/tensor/random.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

// ms per call of 5 calls, the ranks starting together; the slowest rank's figure.
double ms_per_call(const std::function<void()>& f) {
  dist::barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) f();
  return dist::all_reduce_scalar(std::chrono::duration<double>(Clock::now() - t0).count() / 5 * 1e3,
                                 dist::ReduceOp::max);
}

// GB/s of copying `bytes` (read and write counted once: the bytes moved), best of 5.
double copy_gb_s(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return double(bytes) / best / 1e9;
}

struct Overlap {
  double compute_ms, both_ms, exposed_ms, share;
};

// Posts the all-reduce of t, computes `reps` 256 x 256 matmuls without entering MPI, waits.
Overlap overlap(Tensor& t, int reps, double alone_ms) {
  Tensor a = Tensor::ones({256, 256}), b = Tensor::ones({256, 256});
  auto compute = [&] {
    for (int i = 0; i < reps; ++i) a = scale(matmul(a, b), 1.0 / 256);
  };
  Overlap o{};
  o.compute_ms = ms_per_call(compute);
  o.both_ms = ms_per_call([&] {
    auto w = dist::all_reduce(t, dist::ReduceOp::avg, dist::ProcessGroup::world(), true);
    compute();
    w->wait();
  });
  o.exposed_ms = std::max(0.0, o.both_ms - o.compute_ms);
  o.share = std::clamp(1.0 - o.exposed_ms / alone_ms, 0.0, 1.0);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  const double mb = argc > 1 ? std::atof(argv[1]) : 25;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t piece = argc > 3 ? std::atoll(argv[3]) : dist::kRingPieceDefault;
  dist::set_ring_piece_elements(piece);
  const auto& world = dist::ProcessGroup::world();
  for (DType dt : {DType::bf16, DType::f32}) {
    const int64_t n = int64_t(mb * 1024 * 1024) / int64_t(dtype_size(dt));
    Tensor t = Tensor::empty({n});
    Generator(uint64_t(dist::world_rank()) + 1).uniform_(t, -1, 1);
    t = t.to(dt);
    auto ours = [&] { dist::all_reduce(t, dist::ReduceOp::avg, world); };
    auto whole = [&] {  // the ring before its pieces: a round's block received whole, then added
      dist::set_ring_piece_elements(INT64_MAX);
      ours();
      dist::set_ring_piece_elements(piece);
    };
    const bool staged = dt != DType::f32;
    // The peers: MPI's blocking all-reduce, and its non-blocking one waited on (what
    // dist::all_reduce posted before the ring), bf16 through an f32 staging copy.
    auto mpi = [&](bool blocking) {
      Tensor f = staged ? t.to(DType::f32) : t;
      if (blocking) {
        MPI_Allreduce(MPI_IN_PLACE, f.raw_data(), int(f.numel()), MPI_FLOAT, MPI_SUM, world.comm());
      } else {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, f.raw_data(), int(f.numel()), MPI_FLOAT, MPI_SUM, world.comm(), &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
      kernels::scale_(f, 1.0 / world.size());
      if (staged) t.copy_(f);
    };
    double ours_ms = 1e30, whole_ms = 1e30, blocking_ms = 1e30, nonblocking_ms = 1e30;
    for (int r = 0; r < rounds; ++r) {  // alternated: a noisy spell slows all four
      ours_ms = std::min(ours_ms, ms_per_call(ours));
      whole_ms = std::min(whole_ms, ms_per_call(whole));
      blocking_ms = std::min(blocking_ms, ms_per_call([&] { mpi(true); }));
      nonblocking_ms = std::min(nonblocking_ms, ms_per_call([&] { mpi(false); }));
    }
    const double bytes = double(n) * double(dtype_size(dt));
    if (dist::world_rank() == 0) {
      const double copy = copy_gb_s(size_t(bytes)), bw = bytes / ours_ms / 1e6;
      std::printf("all_reduce %s %.1f MB, %d ranks: %.2f ms (%.2f GB/s algorithm bandwidth, %.0f %% of a memory copy's "
                  "%.2f GB/s; pieces of %lld); the ring with whole rounds %.2f ms (%.2fx ours, %.2f GB/s); peers%s: "
                  "MPI_Allreduce %.2f ms (%.2fx ours, %.2f GB/s), MPI_Iallreduce + wait %.2f ms (%.2fx)\n",
                  dtype_name(dt), bytes / (1024 * 1024), world.size(), ours_ms, bw, 100 * bw / copy, copy,
                  (long long)piece, whole_ms, whole_ms / ours_ms, bytes / whole_ms / 1e6,
                  staged ? " through f32 staging" : "", blocking_ms, blocking_ms / ours_ms, bytes / blocking_ms / 1e6,
                  nonblocking_ms, nonblocking_ms / ours_ms);
    }
    // Matmuls for about as long as the all-reduce alone.
    Tensor a = Tensor::ones({256, 256});
    auto one = [&] { a = scale(matmul(a, a), 1.0 / 256); };
    one();  // the primitive's creation is not a matmul's time
    const double one_ms = std::min(ms_per_call(one), ms_per_call(one));
    const int reps = std::max(1, int(ours_ms / std::max(one_ms, 1e-3)));
    Overlap best{0, 0, 1e30, 0};
    for (int r = 0; r < rounds; ++r) {
      const Overlap o = overlap(t, reps, ours_ms);
      if (o.exposed_ms < best.exposed_ms) best = o;
    }
    if (dist::world_rank() == 0)
      std::printf("  overlap: compute %.2f ms, compute + all-reduce %.2f ms, exposed %.2f ms: %.0f %% of the all-reduce "
                  "hidden\n",
                  best.compute_ms, best.both_ms, best.exposed_ms, 100 * best.share);
  }
}
