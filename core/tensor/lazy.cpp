// Lazy tensors (see lazy.h).
#include "core/tensor/lazy.h"


#include "core/autograd/grad_mode.h"

namespace booster {

namespace {
thread_local bool t_lazy = false;

// Copies region r of a tensor that holds `own` of the same logical tensor (t's data) into a
// new tensor of dtype, converting only the stretches r covers (a file-backed t is read there
// only); every element of r must be there.
Tensor copy_region(const Tensor& t, const Region& own, const Region& r, DType dtype) {
  const Tensor src = t.is_contiguous() ? t : t.contiguous();
  Tensor out = Tensor::empty(r.local_shape(), dtype);
  const size_t ds = dtype_size(dtype), ss = dtype_size(src.dtype());
  auto* d = static_cast<char*>(out.raw_data());
  const auto* s = static_cast<const char*>(src.raw_data());
  const int64_t shared = for_each_overlap(r.runs(), own.runs(), [&](int64_t dl, int64_t sl, int64_t n) {
    convert(s + sl * int64_t(ss), src.dtype(), d + dl * int64_t(ds), dtype, n);
  });
  BOOSTER_CHECK_T(ShapeError, shared == r.numel(), "region_values: ", r.str(), " is not inside what the tensor holds (",
                  own.str(), ")");
  return out;
}
}  // namespace

LazyTensorScope::LazyTensorScope() : prev_(t_lazy) { t_lazy = true; }
LazyTensorScope::~LazyTensorScope() { t_lazy = prev_; }
bool LazyTensorScope::active() { return t_lazy; }

Tensor make_lazy(const Shape& shape, DType dtype, double value) {
  for (int64_t d : shape) BOOSTER_CHECK_T(ShapeError, d >= 0, "empty: negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->lazy = std::make_shared<LazyRecipe>();
  impl->lazy->value = value;
  return Tensor(std::move(impl));
}

bool is_lazy(const Tensor& t) { return t.defined() && t.impl()->lazy && !t.impl()->storage; }

LazyRecipe* lazy_recipe(const Tensor& t) { return is_lazy(t) ? t.impl()->lazy.get() : nullptr; }

namespace {
// Makes `next` t's recipe (keeping its name) when t is lazy; false otherwise.
bool record(Tensor& t, LazyRecipe next) {
  LazyRecipe* r = lazy_recipe(t);
  if (!r) return false;
  next.name = std::move(r->name);
  *r = std::move(next);
  return true;
}
}  // namespace

bool lazy_record_draw(Tensor& t, const Draw& d) { return record(t, {LazyRecipe::Kind::draw, 0, d, nullptr, ""}); }

bool lazy_record_constant(Tensor& t, double value) {
  return record(t, {LazyRecipe::Kind::constant, value, Draw{}, nullptr, ""});
}

void lazy_set_source(Tensor& t, std::function<void(Tensor& local, const Region& r)> source) {
  LazyRecipe* r = lazy_recipe(t);
  BOOSTER_CHECK(r != nullptr, "lazy_set_source: ", t.describe(), " is not lazy");
  r->kind = LazyRecipe::Kind::source;
  r->source = std::move(source);
}

void assign_or_adopt(Tensor dst, const Tensor& src) {
  if (!is_lazy(dst)) {
    dst.copy_(src);
    return;
  }
  BOOSTER_CHECK_T(ShapeError, src.shape() == dst.shape() && !dst.region(), "assign_or_adopt: ", src.describe(),
                  " cannot be the source of lazy ", dst.describe());
  lazy_set_source(dst, [src](Tensor& local, const Region& r) { local.copy_(region_values(src, r, local.dtype())); });
}

Tensor region_values(const Tensor& t, const Region& r, DType dtype) {
  const Region own = t.region() ? *t.region() : Region::whole(t.shape());
  BOOSTER_CHECK_T(ShapeError, r.full == own.full, "region_values: ", r.str(), " is not a region of the tensor's ",
                  shape_str(own.full));
  LazyRecipe* recipe = lazy_recipe(t);
  if (!recipe) return copy_region(t, own, r, dtype);
  const bool prev = t_lazy;
  t_lazy = false;  // the values are real
  struct Restore {
    bool v;
    ~Restore() { t_lazy = v; }
  } restore{prev};
  NoGradGuard ng;
  Tensor out = Tensor::empty(r.local_shape(), dtype);
  switch (recipe->kind) {
    case LazyRecipe::Kind::constant: out.fill_(recipe->value); break;
    case LazyRecipe::Kind::draw: fill_draw(out, recipe->draw, r.runs()); break;
    case LazyRecipe::Kind::source: recipe->source(out, r); break;
  }
  return out;
}

void materialize(Tensor t) {
  if (!is_lazy(t)) return;
  TensorImpl* impl = t.impl();
  const Region r = impl->region ? *impl->region : Region::whole(impl->shape);
  Tensor v = region_values(t, r, impl->dtype);
  impl->storage = v.storage();
  impl->strides = contiguous_strides(impl->shape);
  impl->offset = 0;
  impl->lazy.reset();
}

void lazy_cast(Tensor t, DType dtype) {
  BOOSTER_CHECK(is_lazy(t), "lazy_cast: ", t.describe(), " is not lazy");
  t.impl()->dtype = dtype;
}

void lazy_restrict(Tensor t, const Region& r) {
  BOOSTER_CHECK(is_lazy(t), "lazy_restrict: ", t.describe(), " is not lazy");
  BOOSTER_CHECK_T(ShapeError, !t.region() && r.full == t.shape(), "lazy_restrict: ", r.str(),
                  " is not a part of the whole tensor ", t.describe());
  t.impl()->shape = r.local_shape();
  t.impl()->strides = contiguous_strides(t.impl()->shape);
  t.set_region(r);
}

Tensor lazy_clone(const Tensor& t) {
  BOOSTER_CHECK(is_lazy(t), "lazy_clone: ", t.describe(), " is not lazy");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->dtype = t.dtype();
  impl->region = t.impl()->region;
  impl->lazy = std::make_shared<LazyRecipe>(*t.impl()->lazy);
  return Tensor(std::move(impl));
}

void throw_lazy_use(const TensorImpl& impl) {
  const std::string name = impl.lazy && !impl.lazy->name.empty() ? " '" + impl.lazy->name + "'" : "";
  BOOSTER_THROW(ValueError, "the ", dtype_name(impl.dtype), " tensor", name, " of shape ", shape_str(impl.shape),
                " was built under nn::LazyInit and holds no data yet: boost the model (booster.boost) or call "
                "nn::materialize(model) before using it");
}

}  // namespace booster
