// All-reduce of one DDP bucket: dist::all_reduce (averaging) against its peers measured
// alternately in the same run. bf16: the ring in bf16 (f32 sums) against MPI_Allreduce on an
// f32 staging copy (what bf16 went through before); f32: MPI's all-reduce (what f32 uses)
// against the same ring. Run under mpirun -np N with OMP_NUM_THREADS=1, as DDP's ranks run:
//   mpirun -np 2 allreduce_bench [MB per bucket, default 25] [rounds, default 5]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "core/dist/collectives.h"
#include "core/dist/ring_collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/raw.h"
#include "core/tensor/random.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

// Best of `rounds` of 5 calls each, in ms per call, the ranks starting each round together.
double best_ms(int rounds, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    dist::barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / 5 * 1e3);
  }
  return dist::all_reduce_scalar(best, dist::ReduceOp::max);
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
    std::function<void()> peer;
    std::string peer_name;
    if (dt == DType::bf16) {
      peer_name = "MPI_Allreduce, f32 staging";
      peer = [&] {
        Tensor f = t.to(DType::f32);
        MPI_Allreduce(MPI_IN_PLACE, f.raw_data(), int(f.numel()), MPI_FLOAT, MPI_SUM, world.comm());
        kernels::scale_(f, 1.0 / world.size());
        t.copy_(f);
      };
    } else {
      peer_name = "ring";
      peer = [&] { dist::ring_all_reduce(t, dist::ReduceOp::avg, world)->wait(); };
    }
    double ours_ms = 1e30, peer_ms = 1e30;
    for (int r = 0; r < rounds; ++r) {  // alternated: a noisy spell slows both
      ours_ms = std::min(ours_ms, best_ms(1, ours));
      peer_ms = std::min(peer_ms, best_ms(1, peer));
    }
    if (dist::world_rank() == 0)
      std::printf("all_reduce %s %.1f MB, %d ranks: %.2f ms; peer (%s) %.2f ms; peer / ours %.2f\n", dtype_name(dt),
                  double(n) * double(dtype_size(dt)) / (1024 * 1024), world.size(), ours_ms, peer_name.c_str(), peer_ms,
                  peer_ms / ours_ms);
  }
}
