// Small helpers shared by the op files: argument checks and f32 staging.
#pragma once

#include <vector>

#include "core/common/parallel.h"
#include "core/kernels/dispatch.h"
#include "core/tensor/tensor.h"

namespace booster::kernels {

/// Throws DTypeError unless every defined tensor has the dtype of the first.
void check_same_dtype(const char* op, const std::vector<const Tensor*>& ts);
/// Throws DTypeError unless t is f32, bf16 or f16.
void check_floating(const char* op, const Tensor& t);
/// A contiguous copy of t in `dtype` without history (t itself when already so).
Tensor contig_as(const Tensor& t, DType dtype);
/// A contiguous f32 copy of t without history (t itself when already so).
inline Tensor f32_contig(const Tensor& t) { return contig_as(t, DType::f32); }
/// A new contiguous f32 tensor holding t's values (never t's storage): for in-place work.
Tensor f32_copy(const Tensor& t);
/// dst += src in place for bf16/f16 of one dtype and shape, both contiguous, on oneDNN's
/// native binary (f32 inside, rounded once); false where it does not run (binary_ops.cpp).
bool add_low_precision_(Tensor& dst, const Tensor& src);
/// Wraps a negative dim index; throws ShapeError naming op.
int64_t wrap_dim(const char* op, int64_t d, int64_t ndim);

}  // namespace booster::kernels
