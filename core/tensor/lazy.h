// Lazy tensors (the storage behind nn::LazyInit, Colossal-AI's LazyInitContext): while a
// LazyTensorScope is alive on a thread, Tensor::empty / zeros / ones / full make tensors
// with a shape and a dtype but no storage, and an initializer applied to one (a random
// draw, a fill) is kept as its recipe instead of run. The recipe is defined over the
// logical tensor, so any region of it can be made alone: a rank materializes only its
// tensor-parallel slice or its ZeRO shard, with the values eager initialization gives.
// Any other use of a lazy tensor's data is an error naming it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace booster {

/// How a lazy tensor's values are made.
struct LazyRecipe {
  enum class Kind { constant, draw, source };
  Kind kind = Kind::constant;
  double value = 0;  // constant
  Draw draw;         // draw: a random initializer's counters
  /// source: writes region r of the logical tensor into `local` (r.local_shape(), any
  /// dtype): a pretrained file or checkpoint read for the part a rank keeps.
  std::function<void(Tensor& local, const Region& r)> source;
  std::string name;  // dotted parameter name, for errors (set as modules register it)
};

/// Makes Tensor::empty / zeros / ones / full lazy on this thread while alive (nestable).
class LazyTensorScope {
 public:
  LazyTensorScope();
  ~LazyTensorScope();
  LazyTensorScope(const LazyTensorScope&) = delete;
  LazyTensorScope& operator=(const LazyTensorScope&) = delete;
  /// True while a scope is alive on this thread.
  static bool active();

 private:
  bool prev_;
};

/// A lazy tensor of `shape` whose values are the constant `value`.
Tensor make_lazy(const Shape& shape, DType dtype, double value);
/// True when t has a recipe and no storage yet.
bool is_lazy(const Tensor& t);
/// The recipe of a lazy tensor (null otherwise).
LazyRecipe* lazy_recipe(const Tensor& t);
/// When t is lazy, keeps the draw as its recipe and returns true (the generator's fills).
bool lazy_record_draw(Tensor& t, const Draw& d);
/// When t is lazy, keeps the constant as its recipe and returns true (fill_).
bool lazy_record_constant(Tensor& t, double value);
/// Makes t's values come from `source` (see LazyRecipe::source).
void lazy_set_source(Tensor& t, std::function<void(Tensor& local, const Region& r)> source);
/// dst.copy_(src); when dst is lazy, src becomes its source instead (kept, not copied: the
/// part a rank keeps is copied out of it at materialization; a file-mapped src is read there).
void assign_or_adopt(Tensor dst, const Tensor& src);
/// Region r of t's logical tensor, in dtype, from t's recipe (t lazy) or t's data (t whole,
/// or holding r inside its own region).
Tensor region_values(const Tensor& t, const Region& r, DType dtype);
/// Gives a lazy t storage and its values (its region, its dtype); no-op when not lazy.
void materialize(Tensor t);
/// A lazy t will materialize in dtype (a cast without data).
void lazy_cast(Tensor t, DType dtype);
/// A lazy t holds only region r of its logical tensor (a tensor-parallel slice) from now on.
void lazy_restrict(Tensor t, const Region& r);
/// A new lazy tensor with a copy of t's recipe, shape, dtype and region (Module::clone).
Tensor lazy_clone(const Tensor& t);
/// The error for using a lazy tensor's data: names it and says what to do.
[[noreturn]] void throw_lazy_use(const TensorImpl& impl);

}  // namespace booster
