// Register-tiled products on AVX-512 (tile_gemm.cpp), one thread each: the kernels of the own
// attention (attention_avx512.h) and of the own bf16 linear products (matmul_tn_avx512.h).
// No intrinsics here: callers check the CPU first (avx512_cpu.h; bf16 needs AVX512-BF16).
#pragma once

#include <cstdint>

#include "core/common/dtype.h"

namespace booster::kernels::tiles {

/// True when the bf16 tiles run here and are the measured choice: AVX512-BF16 without AMX (on
/// AMX CPUs oneDNN runs bf16 products on AMX tiles, which these were never timed against).
bool bf16_ok();

/// C [M, N] (rows at ldc) = alpha A B, A(i, k) = a[i a_rs + k a_cs] (rows, columns or any
/// other strides: a transposed A costs no copy), B [K, N] rows at ldb. Column blocks of 64,
/// each swept by tiles of 6 rows x 64 columns (24 accumulators) while it stays in cache.
void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb,
          float* c, int64_t ldc, float alpha = 1.0f);
/// The same in bf16 on vdpbf16ps: A's elements and B's are 32-bit words holding two bf16 of
/// consecutive k (the lower one first), K counts those pairs; sums in f32, C in f32 or rounded
/// once to bf16 (nearest even).
void gemm(int64_t M, int64_t N, int64_t K, const uint32_t* a, int64_t a_rs, int64_t a_cs, const uint32_t* b,
          int64_t ldb, float* c, int64_t ldc, float alpha = 1.0f);
void gemm(int64_t M, int64_t N, int64_t K, const uint32_t* a, int64_t a_rs, int64_t a_cs, const uint32_t* b,
          int64_t ldb, bf16_t* c, int64_t ldc, float alpha = 1.0f);

/// dst[c][r] = src[r][c] for r < rows, c < cols (src rows at ld), and 0 for rows <= r < ldd
/// (ldd: rows rounded up to 16, the panel's row length). 32-bit elements (f32, or bf16 pairs).
/// Each 16-row block prefetches the next one's pieces into L2: the f32 attention's P^T pack
/// (197 x 197, cold) 0.285 / 0.284 -> 0.233 / 0.231 ms a layer per thread (ViT-Ti, alternated).
void pack_transposed(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst, int64_t ldd);

}  // namespace booster::kernels::tiles
