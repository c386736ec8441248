// Packing a matmul's right operand into oneDNN's blocked weight layouts on AVX-512
// (blocked_pack.cpp), in place of oneDNN 2.6's reorder: 1.3-3.2x as fast (BM_WeightPack).
#pragma once

#include <dnnl.hpp>

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// Writes src (2-D [K, N], rows or columns contiguous, f32 or bf16) into dst laid out as md
/// when md is oneDNN's BA16a64b (f32) or BA16a64b2a (bf16) layout of [K, N] (what its
/// AVX-512 matmuls pick for weights; padded blocks filled with zeros) and the CPU has
/// AVX-512; returns false, having written nothing, for anything else.
bool pack_blocked(const Tensor& src, const dnnl::memory::desc& md, void* dst);

}  // namespace booster::kernels
