// All-reduce of one DDP bucket (or one tensor-parallel activation): dist::all_reduce
// (averaging; the ring from 64 Ki elements) against MPI_Allreduce measured alternately in
// the same run, bf16 through an f32 staging copy (the path bf16 took before the ring). Run
// under mpirun -np N with OMP_NUM_THREADS=1, as DDP's ranks run:
//   mpirun -np 2 allreduce_bench [MB per bucket, default 25] [rounds, default 5]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "core/dist/collectives.h"
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

}  // namespace

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  const double mb = argc > 1 ? std::atof(argv[1]) : 25;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const auto& world = dist::ProcessGroup::world();
  for (DType dt : {DType::bf16, DType::f32}) {
    const int64_t n = int64_t(mb * 1024 * 1024) / int64_t(dtype_size(dt));
    Tensor t = Tensor::empty({n});
    Generator(uint64_t(dist::world_rank()) + 1).uniform_(t, -1, 1);
    t = t.to(dt);
    auto ours = [&] { dist::all_reduce(t, dist::ReduceOp::avg, world); };
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
    double ours_ms = 1e30, blocking_ms = 1e30, nonblocking_ms = 1e30;
    for (int r = 0; r < rounds; ++r) {  // alternated: a noisy spell slows all three
      ours_ms = std::min(ours_ms, ms_per_call(ours));
      blocking_ms = std::min(blocking_ms, ms_per_call([&] { mpi(true); }));
      nonblocking_ms = std::min(nonblocking_ms, ms_per_call([&] { mpi(false); }));
    }
    if (dist::world_rank() == 0)
      std::printf("all_reduce %s %.1f MB, %d ranks: %.2f ms; peers%s: MPI_Allreduce %.2f ms (%.2fx ours), "
                  "MPI_Iallreduce + wait %.2f ms (%.2fx)\n",
                  dtype_name(dt), double(n) * double(dtype_size(dt)) / (1024 * 1024), world.size(), ours_ms,
                  staged ? " through f32 staging" : "", blocking_ms, blocking_ms / ours_ms, nonblocking_ms,
                  nonblocking_ms / ours_ms);
  }
}
