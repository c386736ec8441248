// The own bf16 a^T b (matmul_tn_avx512.h) against the exact product of the same bf16 values:
// within one bf16 rounding of the result (plus f32 accumulation), at shapes that take every
// tile form: narrower left or right operand (the result comes out in place or turned around),
// odd row counts (a last row paired with zeros), widths that are not whole 32-column chunks or
// 6-row tiles, and rows with a stride longer than their width.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/kernels/matmul_tn_avx512.h"
#include "core/kernels/raw.h"
#include "core/tensor/random.h"

using namespace booster;

namespace {

Tensor random_bf16(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor f = Tensor::empty({rows, cols});
  Generator(seed).uniform_(f, -1, 1);
  return f.to(DType::bf16);
}

// a's column sums in double, and each one's bound as expect_product's.
void expect_sums(const Tensor& a, const Tensor& got, const std::string& what) {
  const int64_t m = a.size(0), p = a.size(1);
  ASSERT_EQ(got.shape(), (Shape{p})) << what;
  ASSERT_EQ(got.dtype(), DType::bf16) << what;
  const auto x = a.contiguous().to_vector(), g = got.to_vector();
  for (int64_t i = 0; i < p; ++i) {
    double exact = 0, mag = 0;
    for (int64_t r = 0; r < m; ++r) exact += x[size_t(r * p + i)], mag += std::abs(double(x[size_t(r * p + i)]));
    ASSERT_NEAR(g[size_t(i)], exact, std::abs(exact) / 256 + mag * double(m) * 6e-8 + 1e-30) << what << " sum " << i;
  }
}

// a^T b in double from the bf16 values, and each element's bound: one bf16 rounding of the
// result (2^-8 relative) plus f32 accumulation over m terms.
void expect_product(const Tensor& a, const Tensor& b, const Tensor& got, const std::string& what) {
  const int64_t m = a.size(0), p = a.size(1), q = b.size(1);
  ASSERT_EQ(got.shape(), (Shape{p, q})) << what;
  ASSERT_EQ(got.dtype(), DType::bf16) << what;
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector(), g = got.to_vector();
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j < q; ++j) {
      double exact = 0, mag = 0;
      for (int64_t r = 0; r < m; ++r) {
        exact += double(x[size_t(r * p + i)]) * y[size_t(r * q + j)];
        mag += std::abs(double(x[size_t(r * p + i)]) * y[size_t(r * q + j)]);
      }
      const double tol = std::abs(exact) / 256 + mag * double(m) * 6e-8 + 1e-30;
      ASSERT_NEAR(g[size_t(i * q + j)], exact, tol) << what << " element (" << i << ", " << j << ")";
    }
}

bool runs_here() { return kernels::mm_tn_bf16_avx512_fits(random_bf16(2, 2, 1), random_bf16(2, 2, 2)); }

TEST(MatmulTNBf16, MatchesTheExactProductAtEveryTileForm) {
  if (!runs_here()) GTEST_SKIP() << "not on this CPU (AVX512-BF16 without AMX)";
  struct Case {
    int64_t m, p, q;
  };
  // p <= q: in place; p > q: turned around. Widths: whole 64-column blocks, one ragged chunk of
  // 32 or fewer (5, 17, 20, 33, 70, 100), rows not a multiple of 6 (the 1-5 row tiles), groups
  // of 48 rows split between threads (192, 200), a column block split between threads (150 x
  // 100: 3 blocks of 3 groups). a's column sums come from a paired whole (p <= q; several
  // chunks of 64 pairs from m = 197 on) or from its panels (p > q).
  for (Case c : std::vector<Case>{{64, 192, 768}, {197, 200, 70}, {33, 5, 17}, {1, 3, 40}, {2, 96, 64},
                                  {301, 20, 100}, {130, 33, 33}, {515, 768, 192}, {97, 150, 100}}) {
    std::ostringstream label;
    label << "[" << c.m << "," << c.p << "]^T x [" << c.m << "," << c.q << "]";
    const std::string what = label.str();
    Tensor a = random_bf16(c.m, c.p, 7), b = random_bf16(c.m, c.q, 8);
    expect_product(a, b, kernels::mm_tn_bf16_avx512(a, b), what);
    Tensor sums;
    expect_product(a, b, kernels::mm_tn_bf16_avx512(a, b, &sums), what + ", with sums");
    expect_sums(a, sums, what);
    // rows strided: columns of wider matrices
    Tensor wa = random_bf16(c.m, c.p + 6, 9).narrow(1, 2, c.p), wb = random_bf16(c.m, c.q + 10, 10).narrow(1, 4, c.q);
    ASSERT_EQ(wa.strides()[0], c.p + 6);
    expect_product(wa, wb, kernels::mm_tn_bf16_avx512(wa, wb, &sums), what + ", strided rows");
    expect_sums(wa, sums, what + ", strided rows");
  }
}

TEST(MatmulTNBf16, RefusesWhatItCannotRun) {
  if (!runs_here()) GTEST_SKIP() << "not on this CPU (AVX512-BF16 without AMX)";
  EXPECT_FALSE(kernels::mm_tn_bf16_avx512_fits(Tensor::ones({4, 2}), Tensor::ones({4, 3})));  // f32
  EXPECT_FALSE(kernels::mm_tn_bf16_avx512_fits(random_bf16(4, 2, 1), random_bf16(5, 3, 2)));  // rows differ
  EXPECT_FALSE(kernels::mm_tn_bf16_avx512_fits(random_bf16(4, 2, 1).transpose(0, 1), random_bf16(2, 3, 2)));
  EXPECT_THROW(kernels::mm_tn_bf16_avx512(random_bf16(4, 2, 1), random_bf16(5, 3, 2)), Error);
}

}  // namespace
