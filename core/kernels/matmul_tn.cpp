// mm_tn: a^T b with the reduction over both operands' rows, the product of every weight
// gradient (dW = dy^T x). Large bf16 products go to the own tiles where they fit (below).
// Otherwise one operand must be read transposed, and which way oneDNN runs it
// fastest depends on the shape, the dtype and the CPU: at ViT-B shapes on an AVX512-BF16 CPU
// (core_bench BM_LinearPart, 2 threads) packing x first was 10 % faster for fc1's dW in bf16
// and 3-6 % slower for the 768 x 768 projections, computing dW^T = x^T dy and transposing it
// 8 % faster for fc2's dW in bf16 and 20 % slower for fc1's. So the first product of each
// large shape times the ways on the data it was given and keeps the fastest.
//
// A way is kept only if it gives the plain product's bits (checked on that first product):
// the choice follows timings, so it differs between runs and ranks, and results must not.
// On the CPUs measured every way agreed bit for bit (the reduction runs in the same order).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/common/check.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/matmul_tn_avx512.h"
#include "core/kernels/raw.h"
#include "core/tensor/strided.h"

namespace booster::kernels {
namespace {

// Below this many multiply-adds a product takes microseconds and the plain way is kept
// untimed (ViT-Ti's smallest weight gradient at batch 8: 1576 x 192 x 192 = 5.8e7).
constexpr double kTuneMinMacs = double(1 << 24);

enum Way : int { kPlain, kPackedRight, kTransposed, kTransposedPacked, kWays };
const char* const kWayNames[kWays] = {"a^T b", "a^T b, b packed", "(b^T a)^T", "(b^T a)^T, a packed"};

// a [m, p], b [m, q] -> [p, q], the one way.
Tensor run_way(int way, const Tensor& a, const Tensor& b) {
  const int64_t p = a.size(1), q = b.size(1);
  switch (way) {
    case kPlain: return mm(a.transpose(0, 1), b, Tensor(), {p, q}, RightOperand::activation);
    case kPackedRight: return mm(a.transpose(0, 1), b, Tensor(), {p, q}, RightOperand::weight);
    case kTransposed:
      return mm(b.transpose(0, 1), a, Tensor(), {q, p}, RightOperand::activation).transpose(0, 1).contiguous();
    default: return mm(b.transpose(0, 1), a, Tensor(), {q, p}, RightOperand::weight).transpose(0, 1).contiguous();
  }
}

struct Choice {
  int way = kPlain;
  std::string report;
};

std::mutex g_mu;
std::unordered_map<std::string, Choice>& choices() {
  static std::unordered_map<std::string, Choice> c;
  return c;
}

std::string key_of(DType t, int64_t m, int64_t p, int64_t q) {
  return std::string(dtype_name(t)) + " [" + std::to_string(m) + "," + std::to_string(p) + "]^T x [" +
         std::to_string(m) + "," + std::to_string(q) + "]";
}

bool same_bits(const Tensor& x, const Tensor& y) {
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * dtype_size(x.dtype())) == 0;
}

// Times every way a few rounds (alternated, so a noisy machine slows all alike; the best
// round of each counts) and returns the plain product with the choice.
Tensor tune(const std::string& key, const Tensor& a, const Tensor& b) {
  using Clock = std::chrono::steady_clock;
  auto timed = [&](int way, double& best) {
    const auto t0 = Clock::now();
    Tensor r = run_way(way, a, b);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    return r;
  };
  double best[kWays];
  std::fill(best, best + kWays, 1e30);
  Tensor plain = timed(kPlain, best[kPlain]);
  bool agrees[kWays] = {true};
  for (int w = 1; w < kWays; ++w) agrees[w] = same_bits(timed(w, best[w]), plain);
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round)
    for (int w = 0; w < kWays; ++w)
      if (agrees[w]) timed(w, best[w]);
  // Another way must beat the plain one by 3 %: within that, timings flip between runs.
  int chosen = kPlain;
  for (int w = 1; w < kWays; ++w)
    if (agrees[w] && best[w] < 0.97 * best[kPlain] && best[w] < best[chosen]) chosen = w;
  std::string report = key + ": " + kWayNames[chosen] + " (";
  for (int w = 0; w < kWays; ++w) {
    report += std::string(w ? ", " : "") + kWayNames[w] + " ";
    report += agrees[w] ? std::to_string(int64_t(best[w] * 1e6)) + " us" : "other bits, not used";
  }
  report += ")";
  std::lock_guard lock(g_mu);
  choices()[key] = Choice{chosen, report};
  return plain;
}

}  // namespace

Tensor mm_tn(const Tensor& a, const Tensor& b, Tensor* a_sums) {
  BOOSTER_CHECK_T(ShapeError, a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(0), "mm_tn: shapes ",
                  shape_str(a.shape()), " and ", shape_str(b.shape()), " do not fit (need [M, P] and [M, Q])");
  const int64_t m = a.size(0), p = a.size(1), q = b.size(1);
  const double macs = double(m) * double(p) * double(q);
  // Large bf16 products run on the own tiles (matmul_tn_avx512.h) where they fit: a rule, not a
  // timing, so the bits never depend on a run. core_bench BM_OwnBf16Product (M = 1576, operands
  // from memory, alternated with oneDNN's plain way in every iteration; 2 threads, Zen-5 class,
  // medians of 3-6 runs of 0.5 s): oneDNN's time / the own one's at ViT-Ti's [192 x 192] 1.02,
  // [192 x 576] 1.02-1.05, [192 x 768] 1.07, [768 x 192] 1.04; ViT-B's [768 x 768] 1.05,
  // [768 x 3072] 1.07, [3072 x 768] 1.12.
  if (!use_reference() && macs >= kTuneMinMacs && mm_tn_bf16_avx512_fits(a, b))
    return mm_tn_bf16_avx512(a, b, a_sums);  // the sums taken while a is paired: no pass of their own
  if (a_sums) *a_sums = sum_dims(a, {0}, false);
  const bool tunable = !use_reference() && a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous() &&
                       macs >= kTuneMinMacs;
  if (!tunable) return run_way(kPlain, a, b);
  const std::string key = key_of(a.dtype(), m, p, q);
  int way = -1;
  {
    std::lock_guard lock(g_mu);
    if (auto it = choices().find(key); it != choices().end()) way = it->second.way;
  }
  return way >= 0 ? run_way(way, a, b) : tune(key, a, b);
}

std::vector<std::string> mm_tn_choices() {
  std::lock_guard lock(g_mu);
  std::vector<std::string> out;
  for (const auto& [key, c] : choices()) out.push_back(c.report);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace booster::kernels
