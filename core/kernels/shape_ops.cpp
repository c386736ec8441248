// Views (view, permute, narrow, expand, ...), copies (contiguous, clone, to) and concat,
// each with its gradient: views route the gradient back to the base's shape.
#include <numeric>
#include <optional>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/tensor/strided.h"

namespace booster {

namespace {

// Strides for viewing (shape, strides) as new_shape without a copy, or empty when the
// memory layout does not allow it (PyTorch's rule: each group of old dims that maps to a
// group of new dims must be contiguous within itself).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  if (shape_numel(old_shape) == 0 || old_shape.empty()) return contiguous_strides(new_shape);
  Shape ns(new_shape.size());
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[size_t(d)];
    if (d == 0 || (old_shape[size_t(d - 1)] != 1 &&
                   old_strides[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
        ns[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

Shape infer_shape(const char* op, const Shape& shape, int64_t numel) {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      BOOSTER_CHECK_T(ShapeError, infer < 0, op, ": only one dim can be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    BOOSTER_CHECK_T(ShapeError, known > 0 && numel % known == 0, op, ": cannot infer -1 in ", shape_str(shape),
                    " for ", numel, " elements");
    s[size_t(infer)] = numel / known;
  }
  BOOSTER_CHECK_T(ShapeError, shape_numel(s) == numel, op, ": shape ", shape_str(shape), " does not hold ", numel,
                  " elements");
  return s;
}

}  // namespace

Tensor Tensor::view(const Shape& shape_in) const {
  const Shape shape = infer_shape("view", shape_in, numel());
  auto st = view_strides(this->shape(), strides(), shape);
  BOOSTER_CHECK_T(ShapeError, st.has_value(), "view: cannot view ", shape_str(this->shape()), " with strides ",
                  shape_str(strides()), " as ", shape_str(shape), " without a copy; use reshape()");
  Tensor y = make_view(*this, shape, *st, offset());
  const Shape in = this->shape();
  return autograd::record("view", {*this}, y, [in](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in)};
  });
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  const Shape shape = infer_shape("reshape", shape_in, numel());
  if (view_strides(this->shape(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const int64_t nd = dim();
  BOOSTER_CHECK_T(ShapeError, int64_t(dims.size()) == nd, "permute: ", dims.size(), " dims given for a ", nd,
                  "-d tensor");
  Shape s(static_cast<size_t>(nd)), st(static_cast<size_t>(nd));
  std::vector<int64_t> inverse(static_cast<size_t>(nd), -1);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t d = kernels::wrap_dim("permute", dims[size_t(i)], nd);
    BOOSTER_CHECK_T(ShapeError, inverse[size_t(d)] < 0, "permute: dim ", d, " repeated");
    inverse[size_t(d)] = i;
    s[size_t(i)] = shape()[size_t(d)];
    st[size_t(i)] = strides()[size_t(d)];
  }
  Tensor y = make_view(*this, s, st, offset());
  return autograd::record("permute", {*this}, y, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[size_t(kernels::wrap_dim("transpose", d0, dim()))], p[size_t(kernels::wrap_dim("transpose", d1, dim()))]);
  return permute(p);
}

Tensor Tensor::narrow(int64_t d_in, int64_t start, int64_t length) const {
  const int64_t d = kernels::wrap_dim("narrow", d_in, dim());
  BOOSTER_CHECK_T(ShapeError, start >= 0 && length >= 0 && start + length <= size(d), "narrow: [", start, ", ",
                  start + length, ") out of range for dim ", d, " of size ", size(d), " in ", shape_str(shape()));
  Shape s = shape();
  s[size_t(d)] = length;
  Tensor y = make_view(*this, s, strides(), offset() + start * strides()[size_t(d)]);
  const Shape in = shape();
  const DType dt = dtype();
  return autograd::record("narrow", {*this}, y, [in, dt, d, start, length](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::zeros(in, dt);
    dx.narrow(d, start, length).copy_(g[0]);
    return std::vector<Tensor>{dx};
  });
}

Tensor Tensor::slice(int64_t d_in, int64_t start, int64_t end) const {
  const int64_t d = kernels::wrap_dim("slice", d_in, dim());
  const int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return narrow(d, start, end - start);
}

Tensor Tensor::select(int64_t d_in, int64_t i) const {
  const int64_t d = kernels::wrap_dim("select", d_in, dim());
  const int64_t ii = i < 0 ? i + size(d) : i;
  BOOSTER_CHECK_T(ShapeError, ii >= 0 && ii < size(d), "select: index ", i, " out of range for dim ", d, " of size ",
                  size(d));
  return narrow(d, ii, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& shape_in) const {
  const int64_t nd = int64_t(shape_in.size()), lead = nd - dim();
  BOOSTER_CHECK_T(ShapeError, lead >= 0, "expand: cannot expand ", shape_str(shape()), " to fewer dims ",
                  shape_str(shape_in));
  Shape s(static_cast<size_t>(nd)), st(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) {
    if (i < lead) {
      s[size_t(i)] = shape_in[size_t(i)];
      st[size_t(i)] = 0;
      continue;
    }
    const int64_t have = size(i - lead), want = shape_in[size_t(i)] == -1 ? have : shape_in[size_t(i)];
    BOOSTER_CHECK_T(ShapeError, have == want || have == 1, "expand: ", shape_str(shape()), " cannot expand to ",
                    shape_str(shape_in), " (dim ", i, ")");
    s[size_t(i)] = want;
    st[size_t(i)] = have == want ? strides()[size_t(i - lead)] : 0;
  }
  if (s == shape()) return *this;
  Tensor y = make_view(*this, s, st, offset());
  const Shape in = shape();
  return autograd::record("expand", {*this}, y, [in](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], in)};
  });
}

Tensor Tensor::unsqueeze(int64_t d_in) const {
  const int64_t d = kernels::wrap_dim("unsqueeze", d_in, dim() + 1);
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::squeeze(int64_t d_in) const {
  const int64_t d = kernels::wrap_dim("squeeze", d_in, dim());
  BOOSTER_CHECK_T(ShapeError, size(d) == 1, "squeeze: dim ", d, " has size ", size(d), ", not 1");
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor y = make_view(*this, s, st, offset());
  const Shape in = shape();
  return autograd::record("squeeze", {*this}, y, [in](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in)};
  });
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = kernels::wrap_dim("flatten", start, dim()), e = kernels::wrap_dim("flatten", end, dim());
  Shape out;
  for (int64_t d = 0; d < s; ++d) out.push_back(size(d));
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= size(d);
  out.push_back(m);
  for (int64_t d = e + 1; d < dim(); ++d) out.push_back(size(d));
  return reshape(out);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  ProfileScope prof_("clone");
  Tensor y = Tensor::empty(shape(), dtype());
  strided_copy(y, *this);
  return autograd::record("clone", {*this}, y, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  ProfileScope prof_("to");
  Tensor y = Tensor::empty(shape(), t);
  strided_copy(y, *this);
  if (!is_floating(t)) return y;
  const DType orig = dtype();
  return autograd::record("to", {*this}, y, [orig](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(orig)};
  });
}

// xs[i]: [..., n_i, ...] along dim -> [..., sum n_i, ...]
Tensor concat(const std::vector<Tensor>& xs, int64_t dim_in) {
  ProfileScope prof_("concat");
  BOOSTER_CHECK_T(ShapeError, !xs.empty(), "concat: no tensors given");
  const int64_t d = kernels::wrap_dim("concat", dim_in, xs[0].dim());
  Shape out = xs[0].shape();
  out[size_t(d)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    kernels::check_same_dtype("concat", {&xs[0], &xs[i]});
    BOOSTER_CHECK_T(ShapeError, xs[i].dim() == xs[0].dim(), "concat: tensor ", i, " has shape ",
                    shape_str(xs[i].shape()), ", tensor 0 has ", shape_str(xs[0].shape()));
    for (int64_t k = 0; k < xs[0].dim(); ++k)
      BOOSTER_CHECK_T(ShapeError, k == d || xs[i].size(k) == xs[0].size(k), "concat: tensor ", i, " has shape ",
                      shape_str(xs[i].shape()), ", tensor 0 has ", shape_str(xs[0].shape()), " (dim ", k, ")");
    out[size_t(d)] += xs[i].size(d);
  }
  Tensor y = Tensor::empty(out, xs[0].dtype());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const auto& x : xs) {
    strided_copy(y.detach().narrow(d, at, x.size(d)), x);
    sizes.push_back(x.size(d));
    at += x.size(d);
  }
  return autograd::record("concat", xs, y, [d, sizes](const std::vector<Tensor>& g) {
    std::vector<Tensor> out;
    int64_t pos = 0;
    for (int64_t n : sizes) {
      out.push_back(g[0].narrow(d, pos, n).contiguous());
      pos += n;
    }
    return out;
  });
}

}  // namespace booster
