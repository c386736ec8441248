// Shared op helpers (see op_util.h).
#include "core/kernels/op_util.h"

namespace booster::kernels {

void check_same_dtype(const char* op, const std::vector<const Tensor*>& ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    BOOSTER_CHECK_T(DTypeError, t->dtype() == first->dtype(), op, ": dtype mismatch, ", dtype_name(first->dtype()),
                    " ", shape_str(first->shape()), " vs ", dtype_name(t->dtype()), " ", shape_str(t->shape()),
                    " (convert with .to() first)");
  }
}

void check_floating(const char* op, const Tensor& t) {
  BOOSTER_CHECK_T(DTypeError, is_floating(t.dtype()), op, ": expected a floating tensor (f32, bf16, f16), got ",
                  dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

Tensor contig_as(const Tensor& t, DType dtype) {
  Tensor d = t.detach();
  if (d.dtype() == dtype && d.is_contiguous()) return d;
  Tensor c = Tensor::empty(d.shape(), dtype);
  c.copy_(d);
  return c;
}

Tensor f32_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), DType::f32);
  c.copy_(t.detach());
  return c;
}

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t w = d < 0 ? d + ndim : d;
  BOOSTER_CHECK_T(ShapeError, w >= 0 && w < std::max<int64_t>(ndim, 1), op, ": dim ", d, " out of range for a ", ndim,
                  "-d tensor");
  return w;
}

}  // namespace booster::kernels
