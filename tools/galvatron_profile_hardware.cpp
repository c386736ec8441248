// galvatron_profile_hardware: profiles this machine's communication as Galvatron's
// profile_hardware does, in its file formats, under mpirun with the world the training will
// use: the all-reduce bus bandwidth of every group size n = W, W/2, ..., 2, consecutive
// (ranks [i n, (i + 1) n)) and strided (by W / n); the point-to-point bandwidth between
// pipeline stages of every pipeline size; and the overlap coefficient, the larger slowdown
// of matmuls and an all-reduce run side by side (a compute thread beside MPI) over each alone.
//   mpirun -np 4 galvatron_profile_hardware --out profiles/
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "galvatron/profiles.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The slowest rank's mean seconds of `iters` calls of f (after one warm-up).
double timed(int iters, const std::function<void()>& f) {
  f();
  dist::barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  return dist::all_reduce_scalar(seconds_since(t0) / iters, dist::ReduceOp::max);
}

// matmuls of [n, n] on this thread for `reps` times; seconds.
double matmuls(int n, int reps) {
  Tensor a = Tensor::ones({n, n}), b = Tensor::ones({n, n});
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) (void)matmul(a, b);
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Profile all-reduce, point-to-point bandwidth and overlap for Galvatron's search"};
  std::string out = "galvatron_profiles";
  double mb = 32;
  int iters = 5, nodes = 1;
  app.add_option("--out", out, "folder of the profile files");
  app.add_option("--mb", mb, "message size in MB");
  app.add_option("--iters", iters, "timed repetitions");
  app.add_option("--nodes", nodes, "nodes of the world (the file names say it)");
  CLI11_PARSE(app, argc, argv);
  dist::launch_from_openmpi();
  const auto& world = dist::ProcessGroup::world();
  const int w = world.size(), r = world.rank();
  galvatron::HardwareProfile h;
  const int64_t elems = int64_t(mb * (1 << 20) / 4);
  Tensor t = Tensor::ones({elems});
  for (int n = w; n >= 2; n /= 2) {
    for (int consec : {1, 0}) {
      if (n == w && consec == 0) continue;
      auto g = dist::split_group(world, consec ? r / n : r % (w / n), r, "profile");
      const double s = timed(iters, [&] { dist::all_reduce(t, dist::ReduceOp::sum, *g); });
      const double busbw = mb / 1000.0 / s * 2.0 * (n - 1) / n;  // GB/s (1 GB = 1000 MB)
      h.allreduce_busbw["allreduce_size_" + std::to_string(n) + "_consec_" + std::to_string(consec)] = busbw;
      if (r == 0) std::printf("all-reduce %6.1f MB over %d ranks, %s: %8.3f ms, bus bandwidth %7.3f GB/s\n", mb, n,
                              consec ? "consecutive" : "strided", s * 1e3, busbw);
    }
  }
  // Stage k's rank i sends to stage k + 1's rank i (the pipeline's messages); pp 1: neighbours.
  for (int p = 1; p <= w; p *= 2) {
    if (w == 1) break;
    const int stride = p == 1 ? 1 : w / p;
    const bool sender = r < stride && r + stride < w, receiver = r >= stride && r < 2 * stride;
    const double s = timed(iters, [&] {
      if (sender) dist::send(t, r + stride, 7);
      if (receiver) dist::recv(t, r - stride, 7);
    });
    h.p2p_bw[p] = mb / 1000.0 / s;
    if (r == 0) std::printf("point-to-point %6.1f MB, pipeline size %d: %8.3f ms, %7.3f GB/s\n", mb, p, s * 1e3, h.p2p_bw[p]);
  }
  if (w == 1) h.p2p_bw[1] = 1e9;  // nothing moves between ranks
  // Overlap: matmuls on a thread of their own beside the all-reduce on this one.
  if (w > 1) {
    const int n = 384, reps = 40;
    const double compute = dist::all_reduce_scalar(matmuls(n, reps), dist::ReduceOp::max);
    const double comm = timed(iters, [&] { dist::all_reduce(t); }) * iters;
    dist::barrier();
    double both_compute = 0;
    const auto t0 = Clock::now();
    std::thread th([&] { both_compute = matmuls(n, reps); });
    for (int i = 0; i < iters; ++i) dist::all_reduce(t);
    const double both_comm = seconds_since(t0);
    th.join();
    both_compute = dist::all_reduce_scalar(both_compute, dist::ReduceOp::max);
    const double both_comm_max = dist::all_reduce_scalar(both_comm, dist::ReduceOp::max);
    h.overlap_coe = std::max({1.0, both_compute / compute, both_comm_max / comm});
    if (r == 0)
      std::printf("overlap: matmuls %.1f ms alone, %.1f ms beside the all-reduce; all-reduce %.1f ms alone, %.1f ms "
                  "beside the matmuls; overlap_coe %.3f\n", compute * 1e3, both_compute * 1e3, comm * 1e3,
                  both_comm_max * 1e3, h.overlap_coe);
  }
  if (r == 0) {
    h.write(out, nodes, w / nodes);
    std::printf("wrote %s/{%s, %s, overlap_coefficient.json}\n", out.c_str(),
                galvatron::HardwareProfile::allreduce_file(nodes, w / nodes).c_str(),
                galvatron::HardwareProfile::p2p_file(nodes, w / nodes).c_str());
  }
  return 0;
}
