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

/// Causal attention (query i attends to keys 0..i), f32 on AVX-512: true when q, k, v (the
/// same [B, h, T, d] shape) fit, checked at run time.
bool causal_attention_avx512_fits(const Tensor& q, const Tensor& k, const Tensor& v);
/// Forward into out (a [B, h, T, dv] view, last stride 1) and lse (contiguous [B, h, T]:
/// each query's log2-sum-exp of its scores in log2 units, all the backward keeps).
void causal_attention_forward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, double alpha);
/// Backward from lse and dout (last stride 1): the probabilities recomputed a head at a time.
void causal_attention_backward_avx512(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                                      const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                      double alpha);

}  // namespace booster::kernels
