// Sum and mean over all or some dims. Reduced dims that form one block [outer, R, inner]
// are summed in place with the inner dim vectorized; other patterns permute first.
#include <algorithm>
#include <numeric>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {
namespace kernels {
namespace {

// Sums a contiguous f32 [outer, r, inner] block over r into out [outer, inner].
void sum_block(const float* x, float* out, int64_t outer, int64_t r, int64_t inner, bool reference) {
  if (reference) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double s = 0;
        for (int64_t k = 0; k < r; ++k) s += x[(o * r + k) * inner + i];
        out[o * inner + i] = float(s);
      }
    return;
  }
  if (inner == 1) {
    parallel_for(outer, r >= kGrain ? 0 : kGrain / std::max<int64_t>(r, 1), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < r; ++k) s += x[o * r + k];
        out[o] = float(s);
      }
    });
    return;
  }
  // Split the inner dim across threads in 64-element blocks; accumulate rows in f32.
  const int64_t blocks = (inner + 63) / 64;
  parallel_for(outer * blocks, outer * r * inner > kGrain ? 0 : INT64_MAX, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * 64, i1 = std::min(inner, i0 + 64);
      float acc[64] = {};
      for (int64_t k = 0; k < r; ++k) {
        const float* row = x + (o * r + k) * inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) acc[i - i0] += row[i];
      }
      for (int64_t i = i0; i < i1; ++i) out[o * inner + i] = acc[i - i0];
    }
  });
}

}  // namespace

Tensor sum_dims(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  const int64_t nd = x.dim();
  std::vector<bool> red(size_t(nd), false);
  for (int64_t d : dims_in) red[size_t(wrap_dim("sum", d, nd))] = true;
  Shape keep_shape = x.shape(), out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (red[size_t(d)]) keep_shape[size_t(d)] = 1;
    else out_shape.push_back(x.size(d));
  }
  if (keepdim) out_shape = keep_shape;

  // Find whether the reduced dims (ignoring size 1) form one block.
  int64_t first = -1, last = -1;
  bool block = true;
  for (int64_t d = 0; d < nd; ++d) {
    if (x.size(d) == 1) continue;
    if (red[size_t(d)]) {
      if (first < 0) first = d;
      else if (last != d - 1 && last >= 0) {
        for (int64_t j = last + 1; j < d; ++j)
          if (x.size(j) != 1) block = false;
      }
      last = d;
    }
  }
  Tensor xf = f32_contig(x);
  int64_t outer = 1, r = 1, inner = 1;
  if (first < 0) {
    inner = x.numel();
  } else if (block) {
    for (int64_t d = 0; d < nd; ++d) {
      if (d < first) outer *= x.size(d);
      else if (d <= last) r *= x.size(d);
      else inner *= x.size(d);
    }
  } else {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[size_t(d)]) perm.push_back(d), outer *= x.size(d);
    for (int64_t d = 0; d < nd; ++d)
      if (red[size_t(d)]) perm.push_back(d), r *= x.size(d);
    xf = xf.permute(perm).contiguous();
  }
  Tensor out = Tensor::empty(out_shape, DType::f32);
  sum_block(xf.data<float>(), out.data<float>(), outer, r, inner, use_reference());
  return out.to(x.dtype());
}

}  // namespace kernels

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ProfileScope prof_("sum");
  kernels::check_floating("sum", x);
  Tensor y = kernels::sum_dims(x.detach(), dims, keepdim);
  const Shape in_shape = x.shape();
  Shape keep_shape = in_shape;
  for (int64_t d : dims) keep_shape[size_t(kernels::wrap_dim("sum", d, x.dim()))] = 1;
  return autograd::record("sum", {x}, y, [in_shape, keep_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(keep_shape).expand(in_shape).contiguous()};
  });
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(static_cast<size_t>(x.dim()));
  std::iota(all.begin(), all.end(), 0);
  return sum(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  return scale(sum(x, dims, keepdim), 1.0 / double(std::max<int64_t>(count, 1)));
}

Tensor mean(const Tensor& x) { return scale(sum(x), 1.0 / double(std::max<int64_t>(x.numel(), 1))); }

}  // namespace booster
