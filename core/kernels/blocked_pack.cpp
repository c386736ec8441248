// Packing into oneDNN's blocked weight layouts on AVX-512 (blocked_pack.h).
//
// Both layouts are, in 32-bit words, blocks of 16 x 64: BA16a64b (f32) holds 16 rows k by 64
// columns n; BA16a64b2a (bf16) holds 16 pairs of rows by 64 columns, each word the two bf16
// of rows 2p and 2p + 1 (lower first). Blocks run over k within n: block (nb, kb) starts at
// word (nb KB + kb) 1024. A row-major source (a weight's transpose in the backward, an
// activation) gives a block row from one or two source rows: copied, or interleaved into
// pairs. A column-major source (W^T in the forward: element (k, n) at W[n][k]) gives a block
// as 16 x 16 transposes of 32-bit words from 16 rows of W (for bf16 the words are W's own
// adjacent pairs). Blocks past K or N (padding) are written element by element with zeros.
//
// core_bench BM_WeightPack ([768, 3072], from memory, 2 threads), oneDNN 2.6's reorder -> this:
// f32 W^T (the forward) 0.75-0.77 -> 0.32-0.33 ms, W (the backward's dx) 0.45 -> 0.33-0.35;
// bf16 W^T 0.48 -> 0.15 ms, W 0.39 -> 0.13. In the ViT-B b8 step (profile, alternated) the
// linears' forward and backward took 6-7 % less in bf16, 1-6 % less in f32.
#include "core/kernels/blocked_pack.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>

#include "core/common/parallel.h"
#include "core/kernels/avx512_math.h"
#include "core/kernels/dnnl_util.h"

namespace booster::kernels {
namespace {

constexpr int64_t kRows = 16, kCols = 64, kBlockWords = kRows * kCols;

// The source as the packer reads it: element (k, n) at base + k sk + n sn (elements).
struct Source {
  const char* base;
  int64_t sk, sn, K, N;
  bool bf16;
  // Element (k, n) as its raw bits, 0 outside [K, N).
  uint32_t bits(int64_t k, int64_t n) const {
    if (k >= K || n >= N) return 0;
    const int64_t i = k * sk + n * sn;
    return bf16 ? reinterpret_cast<const uint16_t*>(base)[i] : reinterpret_cast<const uint32_t*>(base)[i];
  }
};

// A block with padding (or a source the vector paths do not read): word by word.
void block_scalar(const Source& s, int64_t kb, int64_t nb, uint32_t* dst) {
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t n = nb * kCols + c;
      dst[r * kCols + c] = s.bf16 ? s.bits(kb * 32 + 2 * r, n) | (s.bits(kb * 32 + 2 * r + 1, n) << 16)
                                  : s.bits(kb * kRows + r, n);
    }
}

// A whole block from a row-major source (sn == 1).
BOOSTER_AVX512 void block_rows(const Source& s, int64_t kb, int64_t nb, uint32_t* dst) {
  if (!s.bf16) {
    const float* src = reinterpret_cast<const float*>(s.base) + kb * kRows * s.sk + nb * kCols;
    for (int64_t r = 0; r < kRows; ++r)
      for (int v = 0; v < 4; ++v)
        _mm512_storeu_si512(dst + r * kCols + 16 * v, _mm512_loadu_si512(src + r * s.sk + 16 * v));
    return;
  }
  const bf16_t* src = reinterpret_cast<const bf16_t*>(s.base) + kb * 32 * s.sk + nb * kCols;
  for (int64_t p = 0; p < kRows; ++p) {
    const bf16_t* lo = src + 2 * p * s.sk;
    const bf16_t* hi = lo + s.sk;
    for (int h = 0; h < 2; ++h) {  // columns 32 h .. 32 h + 31
      const __m512i a = _mm512_loadu_si512(lo + 32 * h), b = _mm512_loadu_si512(hi + 32 * h);
      _mm512_storeu_si512(dst + p * kCols + 32 * h, avx512::pair_words(a, b, false));
      _mm512_storeu_si512(dst + p * kCols + 32 * h + 16, avx512::pair_words(a, b, true));
    }
  }
}

// A whole block from a column-major source (sk == 1): word (r, c) is word kb 16 + r of
// column n = nb 64 + c's run (f32 elements, or bf16 pairs), 16 x 16 transposes.
BOOSTER_AVX512 void block_columns(const Source& s, int64_t kb, int64_t nb, uint32_t* dst) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(s.base);
  const int64_t ld = s.bf16 ? s.sn / 2 : s.sn;  // words between columns
  for (int64_t c0 = 0; c0 < kCols; c0 += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(words + (nb * kCols + c0 + i) * ld + kb * kRows);
    avx512::transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * kCols + c0, r[i]);
  }
}

}  // namespace

bool pack_blocked(const Tensor& src, const dnnl::memory::desc& md, void* dst) {
  const DType dt = src.dtype();
  if (!avx512::cpu_ok() || src.dim() != 2 || (dt != DType::f32 && dt != DType::bf16)) return false;
  const int64_t K = src.size(0), N = src.size(1), sk = src.strides()[0], sn = src.strides()[1];
  const bool bf16 = dt == DType::bf16, rows = sn == 1, columns = sk == 1 && !rows;
  if (!rows && !columns) return false;
  using tag = dnnl::memory::format_tag;
  if (md != dnnl::memory::desc({K, N}, dnnl_type(dt), bf16 ? tag::BA16a64b2a : tag::BA16a64b)) return false;
  // bf16 columns are read as words: pairs must not straddle a column's end.
  const bool words_ok = !bf16 || (sn % 2 == 0 && reinterpret_cast<uintptr_t>(src.raw_data()) % 4 == 0);
  const Source s{static_cast<const char*>(src.raw_data()), sk, sn, K, N, bf16};
  const int64_t per_block = bf16 ? 32 : kRows;  // source rows a block covers
  const int64_t KB = (K + per_block - 1) / per_block, NB = (N + kCols - 1) / kCols;
  auto* out = static_cast<uint32_t*>(dst);
  parallel_for(NB * KB, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t nb = b / KB, kb = b % KB;
      uint32_t* blk = out + b * kBlockWords;
      const bool whole = (kb + 1) * per_block <= K && (nb + 1) * kCols <= N;
      if (whole && rows) block_rows(s, kb, nb, blk);
      else if (whole && words_ok) block_columns(s, kb, nb, blk);
      else block_scalar(s, kb, nb, blk);
    }
  });
  return true;
}

}  // namespace booster::kernels
