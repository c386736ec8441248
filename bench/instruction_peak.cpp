// instruction_peak: the physical limits behind the matmul ceilings. Each OpenMP thread runs
// independent chains of one instruction on registers (no memory traffic): vfmadd231ps on 16
// f32 lanes (32 FLOP an instruction) and, where the CPU has AVX512-BF16, vdpbf16ps (16 lanes
// each adding two bf16 products: 64 FLOP). Printed beside oneDNN's matmul ceiling in each
// dtype (bench/ceiling.h, measured in the same run) and the share of its instruction's peak
// the matmul reaches: where bf16's peak is twice fp32's, bf16 matmuls should run near twice
// as fast; where oneDNN's bf16 matmul falls short of its peak, that is the gap to close.
//   OMP_NUM_THREADS=2 instruction_peak [--m 1024 --k 768 --n 3072]
#include <CLI/CLI.hpp>

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ceiling.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/avx512_math.h"

using namespace booster;

namespace {

constexpr int kChains = 12;                // independent accumulators: enough to cover the latency
constexpr int64_t kIterations = 20'000'000;  // a few hundred ms a thread

// FLOP/s of one thread's chains of vfmadd231ps; the sums are returned so nothing is dropped.
BOOSTER_AVX512 double fma_rate(float* sink) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  *sink = _mm512_reduce_add_ps(total);
  return double(kIterations) * kChains * 32 / s;
}

// The same with vdpbf16ps: each lane adds a pair of bf16 products (4 FLOP).
BOOSTER_AVX512_BF16 double dpbf16_rate(float* sink) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  *sink = _mm512_reduce_add_ps(total);
  return double(kIterations) * kChains * 64 / s;
}

// GFLOP/s of all threads at once (the best of three runs of `rate` on each thread, summed).
template <typename F>
double all_threads(F rate) {
  double total = 0;
  float sink = 0;
#pragma omp parallel reduction(+ : total)
  {
    float s = 0;
    double best = 0;
    for (int r = 0; r < 3; ++r) best = std::max(best, rate(&s));
    total += best / 1e9;
#pragma omp atomic
    sink += s;
  }
  if (sink == 12345.0f) std::printf(" ");  // keeps the chains' results alive
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Peak GFLOP/s of the f32 FMA and the bf16 dot-product instructions beside oneDNN's matmuls"};
  int64_t m = 1024, k = 768, n = 3072;
  app.add_option("--m", m), app.add_option("--k", k), app.add_option("--n", n);
  CLI11_PARSE(app, argc, argv);
  if (!kernels::avx512::cpu_ok()) {
    std::printf("this CPU has no AVX-512: nothing to measure\n");
    return 0;
  }
  const int threads = omp_get_max_threads();
  const double fma = all_threads(fma_rate);
  const bool bf16 = kernels::avx512::cpu_bf16_ok();
  const double dp = bf16 ? all_threads(dpbf16_rate) : 0;
  bench::RawMatmul mf(m, k, n, DType::f32), mb(m, k, n, DType::bf16);
  const double f32_mm = mf.ok() ? mf.gflops() : 0, bf16_mm = mb.ok() ? mb.gflops() : 0;
  std::printf("%d threads; matmul [%lld x %lld] x [%lld x %lld]\n", threads, (long long)m, (long long)k, (long long)k,
              (long long)n);
  std::printf("  %-5s %12s %14s %10s  %s\n", "dtype", "instruction", "peak GFLOP/s", "matmul", "matmul / peak (oneDNN)");
  std::printf("  %-5s %12s %14.1f %10.1f  %.2f (%s)\n", "fp32", "vfmadd231ps", fma, f32_mm, f32_mm / fma, mf.impl().c_str());
  if (bf16)
    std::printf("  %-5s %12s %14.1f %10.1f  %.2f (%s)\n", "bf16", "vdpbf16ps", dp, bf16_mm, bf16_mm / dp, mb.impl().c_str());
  else
    std::printf("  bf16: no AVX512-BF16 on this CPU (oneDNN's bf16 matmul: %.1f GFLOP/s)\n", bf16_mm);
  if (bf16) std::printf("bf16 / fp32: instructions %.2fx, matmuls %.2fx\n", dp / fma, bf16_mm / f32_mm);
  return 0;
}
