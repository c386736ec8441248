// Attention a head at a time on AVX-512 (attention_avx512.cpp): the scores of one head stay
// in the core's cache from the product that makes them, through the softmax, to the product
// that reads them, in the forward and in the backward.
#pragma once

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// True when the AVX-512 attention kernels run q, k, v of this dtype on this CPU and layout
/// (checked at run time): f32 on AVX-512 F/BW/DQ/VL, bf16 also with AVX512-BF16 but no AMX
/// and even widths and strides; every operand's last stride 1.
bool attention_avx512_fits(const Tensor& q, const Tensor& k, const Tensor& v);
/// True when the kernels read t as it is at dtype dt (q, k, v, and the backward's output
/// gradient: else pass a contiguous copy).
bool attention_avx512_operand_fits(const Tensor& t, DType dt);

/// Forward of softmax(alpha q k^T) v for q [B, h, Tq, d], k [B, h, Tk, d], v [B, h, Tk, dv]:
/// writes probs (contiguous [B, h, Tq, Tk]) and out (a [B, h, Tq, dv] view, last stride 1).
void attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& out, double alpha);

/// Backward: from probs and dout ([B, h, Tq, dv], last stride 1) into dq, dk, dv (views like
/// q, k, v; each may be undefined when not wanted).
void attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                               const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, double alpha);

// Attention keeping each query's log-sum-exp (FlashAttention's block): the operands fit as
// attention_avx512_fits says (f32 on AVX-512, bf16 with AVX512-BF16 and no AMX).
/// Forward into out (a [B, h, Tq, dv] view, last stride 1) and lse (contiguous [B, h, Tq]:
/// each query's log2-sum-exp of its scores in log2 units, all the backward keeps). causal:
/// Tq == Tk and query i sees keys 0..i; else every query sees every key.
void flash_attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, double alpha, bool causal);
/// Backward from lse and dout (last stride 1), the probabilities recomputed a head at a time,
/// into dq, dk, dv (overwritten, in q's dtype; each may be undefined). delta (contiguous
/// [B, h, Tq] f32, or undefined: taken from the row) is each query's <dO, O> over all its keys,
/// for a block of them (f32 only).
void flash_attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                                     const Tensor& delta, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv, double alpha, bool causal);

}  // namespace booster::kernels
