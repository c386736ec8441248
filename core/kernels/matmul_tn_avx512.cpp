// a^T b in bf16 on AVX512-BF16 tiles (matmul_tn_avx512.h).
//
// The reduction runs over both operands' rows, and vdpbf16ps multiplies pairs of consecutive
// reduction elements, so both operands are needed as pairs of rows (32-bit words). The
// narrower operand, whose elements the tiles (tile_gemm.h) broadcast, is paired whole once,
// [m / 2, width] words; the wider one a column block of 64 at a time (a panel of [m / 2, 64]
// words, 200 KB at m = 1576, in the core's L2), by the thread whose tiles read it. A product
// whose left operand is the wider computes (b^T a)^T: each unit's block of results (48 x 64,
// in f32 in the thread's scratch) is turned around as it is stored, instead of a pass over
// the whole result after.
#include "core/kernels/matmul_tn_avx512.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "core/common/check.h"
#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"
#include "core/kernels/tile_gemm.h"

namespace booster::kernels {
namespace {

// Rows of the result one unit of work takes under one column block of 64 (8 tiles of 6).
constexpr int64_t kGroupRows = 48;

// Pairs of rows one chunk of the narrower operand's pairing takes; with column sums, each
// chunk's are added up on their own and the chunks' in order, so the sums' bits do not depend
// on the number of threads.
constexpr int64_t kChunkPairs = 64;

// dst[c][r] = s[r][c] rounded to bf16 for r < rows (<= 48), c < cols (<= 64): a unit's
// block of f32 results (rows at 64) stored turned around, 16 x 16 at a time through registers.
BOOSTER_AVX512_BF16 void store_turned(const float* s, int64_t rows, int64_t cols, bf16_t* dst, int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows - r0);
    const __mmask16 rm = avx512::lanes(nr);
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512 v[16];
      for (int64_t i = 0; i < 16; ++i) v[i] = i < nr ? _mm512_loadu_ps(s + (r0 + i) * 64 + c0) : _mm512_setzero_ps();
      avx512::transpose16(v);
      for (int64_t j = 0; j < std::min<int64_t>(16, cols - c0); ++j) {
        bf16_t* d = dst + (c0 + j) * ldd + r0;
        if (nr == 16) avx512::store16_native(d, v[j]);
        else avx512::store16_native(d, rm, v[j]);
      }
    }
  }
}

// out [w, n] (rows at ldo) = s^T t for s [m, w] (rows at lds, the narrower operand) and
// t [m, n] (rows at ldt); with `turned`, out^T [n, w] (rows at ldo) instead, each unit's
// block turned around as it is stored (no pass over the whole result after). With s_sums
// ([w] floats) or t_sums ([n rounded up to 64]), the column sums of s or t, taken while they
// are paired.
void product(int64_t m, int64_t w, int64_t n, const bf16_t* s, int64_t lds, const bf16_t* t, int64_t ldt, bf16_t* out,
             int64_t ldo, float* s_sums, float* t_sums, bool turned) {
  const int64_t all_pairs = (m + 1) / 2, ldp = (w + 15) / 16 * 16;
  Tensor packed = Tensor::empty({std::max<int64_t>(1, all_pairs * ldp)});  // 32-bit words
  auto* sp = reinterpret_cast<uint32_t*>(packed.raw_data());
  const int64_t chunks = (all_pairs + kChunkPairs - 1) / kChunkPairs;
  Tensor chunk_sums = s_sums ? Tensor::zeros({chunks, ldp}) : Tensor();
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t p0 = c * kChunkPairs, p1 = std::min(all_pairs, p0 + kChunkPairs);
      avx512::pack_pairs(s + 2 * p0 * lds, std::min(2 * p1, m) - 2 * p0, w, lds, sp + p0 * ldp, ldp,
                         s_sums ? chunk_sums.data<float>() + c * ldp : nullptr);
    }
  });
  if (s_sums) {
    std::fill(s_sums, s_sums + w, 0.0f);
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t j = 0; j < w; ++j) s_sums[j] += chunk_sums.data<float>()[c * ldp + j];
  }
  // Units of work: a column block of 64 and a group of 48 rows, threads taking contiguous runs
  // of them column block by column block; a thread pairs a block's columns of t (its panel,
  // [m / 2, 64] words) once for its run of units in that block, and adds up their column sums
  // when its run holds the block's first unit (one thread per block).
  const int64_t blocks = (n + 63) / 64, groups = (w + kGroupRows - 1) / kGroupRows;
  if (t_sums) std::fill(t_sums, t_sums + blocks * 64, 0.0f);
  parallel_for(blocks * groups, 1, [&](int64_t u0, int64_t u1) {
    Tensor panel_t = Tensor::empty({all_pairs * 64}), block_t = turned ? Tensor::empty({kGroupRows * 64}) : Tensor();
    auto* panel = reinterpret_cast<uint32_t*>(panel_t.raw_data());
    int64_t packed = -1;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t blk = u / groups, n0 = blk * 64, g0 = u % groups * kGroupRows;
      const int64_t nn = std::min<int64_t>(64, n - n0), rows = std::min(kGroupRows, w - g0);
      if (blk != packed) {
        avx512::pack_pairs(t + n0, m, nn, ldt, panel, 64, t_sums && g0 == 0 ? t_sums + n0 : nullptr);
        packed = blk;
      }
      if (!turned) {
        tiles::gemm(rows, nn, all_pairs, sp + g0, 1, ldp, panel, 64, out + g0 * ldo + n0, ldo);
        continue;
      }
      tiles::gemm(rows, nn, all_pairs, sp + g0, 1, ldp, panel, 64, block_t.data<float>(), 64);
      store_turned(block_t.data<float>(), rows, nn, out + n0 * ldo + g0, ldo);
    }
  });
}

}  // namespace

bool mm_tn_bf16_avx512_fits(const Tensor& a, const Tensor& b) {
  auto rows_ok = [](const Tensor& t) {
    return t.dtype() == DType::bf16 && t.dim() == 2 && t.strides()[1] == 1 && t.strides()[0] >= t.size(1);
  };
  return tiles::bf16_ok() && rows_ok(a) && rows_ok(b) && a.size(0) == b.size(0) && a.size(0) > 0;
}

Tensor mm_tn_bf16_avx512(const Tensor& a, const Tensor& b, Tensor* a_sums) {
  BOOSTER_CHECK(mm_tn_bf16_avx512_fits(a, b), "mm_tn_bf16_avx512: operands ", shape_str(a.shape()), " and ",
                shape_str(b.shape()), " do not fit (bf16 [M, P] and [M, Q], rows of unit stride, AVX512-BF16)");
  const int64_t m = a.size(0), p = a.size(1), q = b.size(1);
  const auto* pa = static_cast<const bf16_t*>(a.raw_data());
  const auto* pb = static_cast<const bf16_t*>(b.raw_data());
  // a's column sums in f32, padded for whole-vector stores (to 16, or to 64 for panels)
  Tensor sums = a_sums ? Tensor::empty({(p + 63) / 64 * 64}) : Tensor();
  float* ps = a_sums ? sums.data<float>() : nullptr;
  Tensor result = Tensor::empty({p, q}, DType::bf16);
  auto* out = static_cast<bf16_t*>(result.raw_data());
  if (p <= q)  // a is the narrower: packed, and the result comes out in place
    product(m, p, q, pa, a.strides()[0], pb, b.strides()[0], out, q, ps, nullptr, false);
  else  // (b^T a)^T, turned around block by block as it is stored
    product(m, q, p, pb, b.strides()[0], pa, a.strides()[0], out, q, nullptr, ps, true);
  if (a_sums) *a_sums = sums.narrow(0, 0, p).to(DType::bf16);
  return result;
}

}  // namespace booster::kernels
