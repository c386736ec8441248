// Raw kernels without autograd, for the engine, optimizers and collectives.
#pragma once

#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// dst += src (same shape; src of any float dtype and strides; dst contiguous).
void add_(Tensor& dst, const Tensor& src);
/// dst *= src in place (same shape and dtype; dst contiguous): bf16/f16 computed in f32 and
/// rounded once, as mul's (binary_ops.cpp).
void mul_(Tensor& dst, const Tensor& src);
/// dst[indices[u]] += rows[u] for dst [V, D] (contiguous, any float dtype: summed in f32 and
/// rounded once), indices i64 [U] each once, rows f32 [U, D] (embedding_ops.cpp).
void add_rows_(Tensor& dst, const Tensor& indices, const Tensor& rows);
/// dst *= s (contiguous float dst).
void scale_(Tensor& dst, double s);
/// Sum of squares of all elements, accumulated in double.
double sum_squares(const Tensor& t);
/// True when every element is finite.
bool all_finite(const Tensor& t);
/// True when every element of every tensor is finite (undefined ones skipped): one pass
/// that the threads split over all of them, not one per tensor.
bool all_finite(const std::vector<Tensor>& ts);

/// How mm treats its right operand.
enum class RightOperand {
  weight,      // a weight: packed into oneDNN's blocked layout first when large
  activation,  // an activation (dW = dy^T x): read in place
};
/// a x b (+ bias broadcast over rows) into a new tensor of out_shape (matmul_ops.cpp).
Tensor mm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& out_shape,
          RightOperand right = RightOperand::weight);
/// c = alpha a x b (+ bias; then alpha must be 1) written into the view c (any strides:
/// oneDNN writes row- or column-major batches of matrices in place, other layouts go
/// through a copy). a, b, c of one dtype (matmul_ops.cpp).
void mm_into(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
             RightOperand right = RightOperand::weight, double alpha = 1.0);
/// a^T b for a [M, P] and b [M, Q] -> [P, Q], the reduction over their rows: a weight
/// gradient (dW = dy^T x). Large bf16 products run on the own AVX512-BF16 tiles where they fit
/// (matmul_tn_avx512.h); of the others, the first product of each large shape times the ways
/// oneDNN can run it and keeps the fastest that gives the plain way's bits (matmul_tn.cpp).
/// With a_sums, also a's column sums ([P], a's dtype, computed in f32: the bias gradient
/// beside dW), on the own tiles in the pass that reads a for the product.
Tensor mm_tn(const Tensor& a, const Tensor& b, Tensor* a_sums = nullptr);
/// What mm_tn chose for each shape it timed, with the timings, one line per shape.
std::vector<std::string> mm_tn_choices();
/// softmax's backward: dx for y = softmax(x) over the last dim ([rows, c] contiguous,
/// any float dtype) and its output gradient dy (any layout), in y's dtype (norm_ops.cpp).
Tensor softmax_backward(const Tensor& y, const Tensor& dy);
/// The same into dx (contiguous, y's dtype and size; may be dy itself), dy contiguous too.
void softmax_backward_into(const Tensor& y, const Tensor& dy, const Tensor& dx);
/// Softmax over the last dim of a contiguous x, in place, without history (norm_ops.cpp).
void softmax_(const Tensor& x);
/// oneDNN's implementation name for an [m, k] x [k, n] matmul of dtype t ("brg:avx512_core_amx",
/// "gemm:jit", ...), or "" when oneDNN has none for this CPU (matmul_ops.cpp).
std::string matmul_implementation(DType t, int64_t m, int64_t k, int64_t n);
/// Sum over dims, in x's dtype, computed in f32 (reduce_ops.cpp).
Tensor sum_dims(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace booster::kernels
