// Strided row walking and the strided, converting copy behind contiguous() and copy_().
#include "core/tensor/strided.h"

#include <cstring>

namespace booster {

namespace detail {
void coalesce(Shape& shape, Shape& sa, Shape& sb) {
  Shape s2, a2, b2;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!s2.empty() && a2.back() == sa[d] * shape[d] && b2.back() == sb[d] * shape[d]) {
      s2.back() *= shape[d];
      a2.back() = sa[d];
      b2.back() = sb[d];
    } else {
      s2.push_back(shape[d]);
      a2.push_back(sa[d]);
      b2.push_back(sb[d]);
    }
  }
  shape = std::move(s2);
  sa = std::move(a2);
  sb = std::move(b2);
}
}  // namespace detail

void strided_copy(const Tensor& dst, const Tensor& src) {
  BOOSTER_CHECK_T(ShapeError, dst.shape() == src.shape(), "copy_: shape mismatch, destination ",
                  shape_str(dst.shape()), " vs source ", shape_str(src.shape()));
  const DType dt = dst.dtype(), st = src.dtype();
  const size_t des = dtype_size(dt), ses = dtype_size(st);
  auto* d = static_cast<char*>(dst.raw_data());
  auto* s = static_cast<const char*>(src.raw_data());
  for_each_row(dst.shape(), dst.strides(), src.strides(),
               [&](int64_t od, int64_t os, int64_t n, int64_t id, int64_t is) {
                 char* dr = d + od * int64_t(des);
                 const char* sr = s + os * int64_t(ses);
                 if (id == 1 && is == 1) {
                   convert(sr, st, dr, dt, n);
                 } else if (dt == st) {
                   for (int64_t i = 0; i < n; ++i) std::memcpy(dr + i * id * des, sr + i * is * ses, des);
                 } else {
                   for (int64_t i = 0; i < n; ++i) convert(sr + i * is * ses, st, dr + i * id * des, dt, 1);
                 }
               });
}

}  // namespace booster
