// Tensor factories, metadata, element access and the raw in-place operations.
#include "core/tensor/tensor.h"

#include <cstring>
#include <sstream>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/tensor/lazy.h"
#include "core/tensor/strided.h"

namespace booster {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<int64_t>(s[d], 1);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

namespace {
// A real contiguous tensor, lazy scope or not.
Tensor allocate(const Shape& shape, DType dtype, MemoryTier* tier = nullptr) {
  for (int64_t d : shape) BOOSTER_CHECK_T(ShapeError, d >= 0, "empty: negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), tier ? *tier : host_tier());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryTier* tier) {
  if (!tier && LazyTensorScope::active()) return make_lazy(shape, dtype, 0.0);
  return allocate(shape, dtype, tier);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  if (LazyTensorScope::active()) return make_lazy(shape, dtype, 0.0);
  Tensor t = allocate(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  if (LazyTensorScope::active()) return make_lazy(shape, dtype, value);
  Tensor t = allocate(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<int64_t> v(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return from_ints(v, {n}).to(dtype);
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype) {
  BOOSTER_CHECK_T(ShapeError, int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
                  " values do not fill shape ", shape_str(shape));
  Tensor t = allocate(shape, dtype);
  convert(values.data(), DType::f32, t.raw_data(), dtype, int64_t(values.size()));
  return t;
}

Tensor Tensor::from_ints(const std::vector<int64_t>& values, const Shape& shape) {
  BOOSTER_CHECK_T(ShapeError, int64_t(values.size()) == shape_numel(shape), "from_ints: ", values.size(),
                  " values do not fill shape ", shape_str(shape));
  Tensor t = allocate(shape, DType::i64);
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> release) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, size_t(shape_numel(shape)) * dtype_size(dtype), std::move(release));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::scalar(double value, DType dtype) {
  Tensor t = allocate({}, dtype);
  t.fill_(value);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  const int64_t dd = d < 0 ? d + nd : d;
  BOOSTER_CHECK_T(ShapeError, dd >= 0 && dd < nd, "size(", d, "): dim out of range for shape ", shape_str(shape()));
  return impl()->shape[dd];
}

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t acc = 1;
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    if (s[d] != 1 && st[d] != acc) return false;
    acc *= s[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!impl()->storage) {
    if (impl()->lazy) throw_lazy_use(*impl());
    BOOSTER_THROW(ValueError, describe(), " has no storage");
  }
  return static_cast<char*>(impl()->storage->data()) + impl()->offset * int64_t(dtype_size(dtype()));
}

double Tensor::item() const {
  BOOSTER_CHECK_T(ShapeError, numel() == 1, "item(): tensor of shape ", shape_str(shape()), " has ", numel(),
                  " elements, expected 1");
  double v = 0;
  if (!is_floating(dtype())) return load_element(raw_data(), dtype(), 0);
  float f;
  convert(raw_data(), dtype(), &f, DType::f32, 1);
  v = f;
  return v;
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = allocate(shape(), DType::f32);
  strided_copy(c, *this);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + numel());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor c = allocate(shape(), DType::i64);
  strided_copy(c, *this);
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + numel());
}

Tensor as_indices(const Tensor& t, const std::string& what) {
  BOOSTER_CHECK_T(DTypeError, t.defined() && is_index(t.dtype()), what, " must be integer indices (i64 or i32), got ",
                  t.defined() ? dtype_name(t.dtype()) : "an undefined tensor", t.defined() ? " " + shape_str(t.shape()) : "");
  return t.dtype() == DType::i64 ? t.contiguous() : t.to(DType::i64);
}

namespace {
void check_inplace_allowed(const Tensor& t, const char* op) {
  BOOSTER_CHECK_T(AutogradError, !(t.requires_grad() && t.is_leaf() && autograd::GradMode::enabled()), op,
                  ": in-place change of a leaf that requires grad; wrap it in a NoGradGuard");
}
}  // namespace

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  if (lazy_record_constant(*this, value)) return *this;
  Tensor one = allocate({}, DType::f32);
  if (!is_floating(dtype())) {
    one = Tensor::from_ints({int64_t(value)}, {});
  } else {
    *one.data<float>() = float(value);
  }
  if (is_contiguous()) {
    const size_t es = dtype_size(dtype());
    char buf[8];
    convert(one.raw_data(), one.dtype(), buf, dtype(), 1);
    char* p = static_cast<char*>(raw_data());
    const int64_t n = numel();
    if (es == 4) {
      uint32_t v;
      std::memcpy(&v, buf, 4);
      auto* q = reinterpret_cast<uint32_t*>(p);
#pragma omp parallel for simd if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) q[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(p + i * es, buf, es);
    }
    return *this;
  }
  strided_copy(*this, make_view(one, shape(), Shape(shape().size(), 0), 0));
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed(*this, "copy_");
  strided_copy(*this, src);
  return *this;
}

void Tensor::set_data(const Tensor& src) {
  TensorImpl* d = impl();
  TensorImpl* s = src.impl();
  d->storage = s->storage;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
  d->lazy = s->lazy;  // a real src leaves d real; a lazy one makes d the same lazy tensor
}

Tensor& Tensor::requires_grad_(bool flag) {
  BOOSTER_CHECK_T(AutogradError, is_leaf(), "requires_grad_: only leaf tensors can change requires_grad");
  BOOSTER_CHECK_T(DTypeError, !flag || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ",
                  dtype_name(dtype()));
  impl()->requires_grad = flag;
  return *this;
}

Tensor Tensor::grad() const { return impl()->grad ? Tensor(impl()->grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    BOOSTER_CHECK_T(ShapeError, g.shape() == shape(), "set_grad: gradient shape ", shape_str(g.shape()),
                    " does not match tensor shape ", shape_str(shape()));
  impl()->grad = g.impl_ptr();
}

Tensor& Tensor::retain_grad() {
  BOOSTER_CHECK_T(AutogradError, requires_grad(), "retain_grad: tensor does not require grad");
  if (!is_leaf()) autograd::retain_grad(*this);
  return *this;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->lazy = impl_->lazy;
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

namespace {
// Adds a hook to one of a leaf's lists; the handle removes it while the leaf lives.
HookHandle add_leaf_hook(const Tensor& t, HookList<std::function<void(const Tensor&)>> TensorImpl::*list,
                         std::function<void(const Tensor&)> hook, const char* what) {
  BOOSTER_CHECK_T(AutogradError, t.is_leaf() && t.requires_grad(), what, ": only leaf tensors that require grad have one");
  const uint64_t id = (t.impl()->*list).add(std::move(hook));
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  return HookHandle([weak, list, id] {
    if (auto impl = weak.lock()) ((*impl).*list).remove(id);
  });
}
}  // namespace

HookHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) {
  return add_leaf_hook(*this, &TensorImpl::post_accumulate_grad_hooks, std::move(hook),
                       "register_post_accumulate_grad_hook");
}

HookHandle Tensor::register_pre_accumulate_grad_hook(std::function<void(const Tensor&)> hook) {
  return add_leaf_hook(*this, &TensorImpl::pre_accumulate_grad_hooks, std::move(hook),
                       "register_pre_accumulate_grad_hook");
}

void Tensor::set_region(const Region& r) {
  BOOSTER_CHECK_T(ShapeError, r.local_shape() == shape(), "set_region: a tensor of shape ", shape_str(shape()),
                  " cannot hold ", r.str(), " (local shape ", shape_str(r.local_shape()), ")");
  impl()->region = r.is_whole() && r.is_box() ? nullptr : std::make_shared<const Region>(r);
}

std::string Tensor::describe() const {
  if (!defined()) return "Tensor(undefined)";
  return detail::concat("Tensor(", dtype_name(dtype()), ", ", shape_str(shape()), impl_->lazy && !impl_->storage ? ", lazy" : "", ")");
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->lazy = base.impl()->lazy;  // a view of a lazy tensor is an error naming it when used
  return Tensor(std::move(impl));
}

}  // namespace booster
