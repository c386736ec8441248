// Walking strided views: the one place that turns (shape, strides) into row loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/common/parallel.h"
#include "core/tensor/tensor.h"

namespace booster {

/// Calls fn(dst_row_offset, src_row_offset) for each innermost row of `shape`, where the
/// offsets are in elements for the two stride sets; the row has shape.back() elements.
/// Dims are coalesced first, so a contiguous pair is one long row. Rows run on OpenMP
/// threads when `parallel` is set and there are many.
template <typename Fn>
void for_each_row(Shape shape, Shape sa, Shape sb, Fn&& fn, bool parallel = true);

/// Copies src into dst (same shape; any strides; converts dtype).
void strided_copy(const Tensor& dst, const Tensor& src);
/// True when t covers its memory densely in some dim order (contiguous or permuted).
bool dense_permuted(const Tensor& t);
/// An uninitialized tensor of t's shape in `dtype`: with t's strides when t is dense
/// permuted (a gradient laid out like its input, so permuting it back copies nothing),
/// contiguous otherwise.
Tensor empty_same_layout(const Tensor& t, DType dtype);
/// empty_same_layout for each of `views` (undefined ones stay undefined); when the defined
/// ones are views of one storage that together cover their span densely (the pieces of
/// one tensor, such as q, k and v split from one projection), they come back as views of
/// one new storage at the same relative offsets and strides: gradients of the pieces are
/// again the pieces of one gradient.
std::vector<Tensor> empty_same_layouts(const std::vector<Tensor>& views, DType dtype);
/// The blocks of `rows[i]` rows of a contiguous tensor, one after another, each with its
/// own storage handle over its part of t's memory (kept alive while any block is): each
/// block is a sole owner, so the autograd engine adopts it as a gradient without a copy
/// (the weight gradients of stacked_linear, computed as one product).
std::vector<Tensor> split_rows_owned(const Tensor& t, const std::vector<int64_t>& rows);
/// t converted to dtype; a dense permuted view keeps its strides (a transposed weight
/// converts as one block, no transposing copy).
Tensor to_dtype_same_layout(const Tensor& t, DType dtype);

// ---- implementation ----
namespace detail {
/// Merges adjacent dims that are contiguous for both stride sets; drops size-1 dims.
void coalesce(Shape& shape, Shape& sa, Shape& sb);
}

template <typename Fn>
void for_each_row(Shape shape, Shape sa, Shape sb, Fn&& fn, bool parallel) {
  detail::coalesce(shape, sa, sb);
  const int nd = int(shape.size());
  if (nd <= 1) {
    fn(int64_t(0), int64_t(0), nd == 0 ? int64_t(1) : shape[0], nd == 0 ? 1 : sa[0], nd == 0 ? 1 : sb[0]);
    return;
  }
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= shape[d];
  const int64_t n = shape[nd - 1], ia = sa[nd - 1], ib = sb[nd - 1];
  // Each thread takes a contiguous run of rows: its first row's index is divided out once,
  // then the offsets step like an odometer (short rows, such as a patch embedding's gather
  // of 16-pixel runs, spent most of their time in the per-row divisions).
  auto run = [&](int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    std::vector<int64_t> idx(size_t(nd), 0);
    int64_t oa = 0, ob = 0, rem = r0;
    for (int d = nd - 2; d >= 0; --d) {
      idx[size_t(d)] = rem % shape[d];
      rem /= shape[d];
      oa += idx[size_t(d)] * sa[d];
      ob += idx[size_t(d)] * sb[d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      fn(oa, ob, n, ia, ib);
      for (int d = nd - 2; d >= 0; --d) {  // next row
        oa += sa[d];
        ob += sb[d];
        if (++idx[size_t(d)] < shape[d]) break;
        oa -= shape[d] * sa[d];
        ob -= shape[d] * sb[d];
        idx[size_t(d)] = 0;
      }
    }
  };
  // on threads past kGrain elements (rows * n), inline below it or when not `parallel`
  parallel_for(rows, parallel ? std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)) : rows, run);
}

}  // namespace booster
