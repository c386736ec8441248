// Shared op helpers (see op_util.h).
#include "core/kernels/op_util.h"

#include <algorithm>
#include <numeric>

namespace booster::kernels {

void check_same_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
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

Tensor empty_like_layout(const Tensor& t, DType dtype) {
  const int64_t nd = t.dim();
  std::vector<int64_t> order(static_cast<size_t>(nd));
  std::iota(order.begin(), order.end(), int64_t(0));
  // Outermost first; size-1 dims anywhere (their stride means nothing).
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    if (t.size(x) == 1 || t.size(y) == 1) return t.size(x) == 1 && t.size(y) != 1;
    return t.strides()[size_t(x)] > t.strides()[size_t(y)];
  });
  Shape permuted;
  for (int64_t d : order) permuted.push_back(t.size(d));
  const Shape dense = contiguous_strides(permuted);
  for (int64_t i = 0; i < nd; ++i)
    if (permuted[size_t(i)] != 1 && t.strides()[size_t(order[size_t(i)])] != dense[size_t(i)])
      return Tensor::empty(t.shape(), dtype);
  std::vector<int64_t> inverse(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) inverse[size_t(order[size_t(i)])] = i;
  return Tensor::empty(permuted, dtype).permute(inverse);
}

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t w = d < 0 ? d + ndim : d;
  BOOSTER_CHECK_T(ShapeError, w >= 0 && w < std::max<int64_t>(ndim, 1), op, ": dim ", d, " out of range for a ", ndim,
                  "-d tensor");
  return w;
}

}  // namespace booster::kernels
