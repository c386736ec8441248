// Tensor: a handle to (storage, shape, strides, offset, dtype) plus autograd state.
// Copies of a Tensor share one TensorImpl, so a Parameter handle keeps its identity when
// its storage is replaced (set_data). Views share storage and never copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/check.h"
#include "core/common/dtype.h"
#include "core/common/hook_handle.h"
#include "core/tensor/region.h"
#include "core/tensor/storage.h"

namespace booster {

class Tensor;
struct LazyRecipe;
namespace autograd { class Node; }

/// The shared state behind Tensor handles.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  // Autograd state.
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves only, created on demand
  HookList<std::function<void(const Tensor&)>> pre_accumulate_grad_hooks;
  HookList<std::function<void(const Tensor&)>> post_accumulate_grad_hooks;

  // The part of a larger logical tensor this one holds (set by a sharding layer); null
  // for a whole tensor. Survives set_data, like every other property of a parameter handle.
  std::shared_ptr<const Region> region;
  // A lazy tensor's recipe (core/tensor/lazy.h): set, with no storage, until materialized.
  std::shared_ptr<LazyRecipe> lazy;
};

/// Number of elements of a shape.
int64_t shape_numel(const Shape& s);
/// Row-major strides of a shape.
Shape contiguous_strides(const Shape& s);
/// "[2, 3, 4]".
std::string shape_str(const Shape& s);

/// An n-dimensional array with autograd.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (no autograd history) ----
  /// Uninitialized contiguous tensor (lazy, with zeros as its values, inside a
  /// LazyTensorScope when no tier is given; so are zeros, ones and full).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, MemoryTier* tier = nullptr);
  /// Tensor filled with zeros.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  /// Tensor filled with ones.
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  /// Tensor filled with `value`.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  /// 0, 1, ..., n-1.
  static Tensor arange(int64_t n, DType dtype = DType::i64);
  /// A copy of `values` (converted to dtype) with the given shape.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32);
  /// A copy of integer values with the given shape (i64).
  static Tensor from_ints(const std::vector<int64_t>& values, const Shape& shape);
  /// A tensor viewing memory owned elsewhere; `release` runs when the last view dies.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> release = {});
  /// One-element tensor of shape [].
  static Tensor scalar(double value, DType dtype = DType::f32);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl()->shape; }
  const Shape& strides() const { return impl()->strides; }
  int64_t offset() const { return impl()->offset; }
  /// Size of dim d (negative counts from the end).
  int64_t size(int64_t d) const;
  int64_t dim() const { return int64_t(impl()->shape.size()); }
  int64_t numel() const { return shape_numel(impl()->shape); }
  DType dtype() const { return impl()->dtype; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  /// True when both handles share one TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  /// True when both tensors view the same storage.
  bool shares_storage(const Tensor& o) const { return impl()->storage == o.impl()->storage; }
  std::shared_ptr<Storage> storage() const { return impl()->storage; }
  /// True when no other handle shares this TensorImpl and no other view shares its
  /// storage: its memory may be reused in place.
  bool is_sole_owner() const { return impl_.use_count() == 1 && impl_->storage.use_count() == 1; }
  TensorImpl* impl() const {
    BOOSTER_CHECK(impl_ != nullptr, "use of an undefined Tensor");
    return impl_.get();
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- element access ----
  /// Address of element 0 of this view.
  void* raw_data() const;
  /// Typed address of element 0; throws DTypeError when T is not the dtype.
  template <typename T>
  T* data() const {
    BOOSTER_CHECK_T(DTypeError, dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value),
                    ">() on a ", dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }
  /// The single element as double; throws unless numel() == 1.
  double item() const;
  /// All elements in row-major order, as float.
  std::vector<float> to_vector() const;
  /// All elements in row-major order, as int64.
  std::vector<int64_t> to_int_vector() const;

  // ---- views and copies (differentiable; defined in kernels/shape_ops.cpp) ----
  /// Same data, new shape (one dim may be -1); throws if the strides do not allow it.
  Tensor view(const Shape& shape) const;
  /// view() when possible, otherwise a contiguous copy.
  Tensor reshape(const Shape& shape) const;
  /// Reorders dims.
  Tensor permute(const std::vector<int64_t>& dims) const;
  /// Swaps two dims.
  Tensor transpose(int64_t d0, int64_t d1) const;
  /// `length` elements of dim d starting at `start`.
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  /// Elements [start, end) of dim d (Python-style negative bounds).
  Tensor slice(int64_t d, int64_t start, int64_t end) const;
  /// Index `i` of dim d, removing that dim.
  Tensor select(int64_t d, int64_t i) const;
  /// Broadcasts size-1 dims (and new leading dims) to `shape` without copying.
  Tensor expand(const Shape& shape) const;
  /// Inserts a dim of size 1 at d.
  Tensor unsqueeze(int64_t d) const;
  /// Removes dim d, which must have size 1.
  Tensor squeeze(int64_t d) const;
  /// Merges dims [start, end] into one.
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  /// This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy.
  Tensor clone() const;
  /// Converted to dtype (this tensor when it already is).
  Tensor to(DType dtype) const;

  // ---- raw in-place (no autograd history; refused on a leaf that requires grad
  //      while grad mode is on, as PyTorch does) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  /// Copies src (same shape, any strides, converting dtype) into this view.
  Tensor& copy_(const Tensor& src);
  /// Points this handle's impl at src's storage, shape and dtype (Parameter resharding).
  void set_data(const Tensor& src);

  // ---- autograd ----
  bool requires_grad() const { return impl()->requires_grad; }
  /// Marks a leaf as requiring grad; throws on a non-leaf.
  Tensor& requires_grad_(bool flag = true);
  /// True for tensors created by the user (no grad_fn).
  bool is_leaf() const { return impl()->grad_fn == nullptr; }
  /// Accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  /// Replaces (or with an undefined tensor clears) the gradient.
  void set_grad(const Tensor& g);
  /// Also keep .grad for this non-leaf tensor in the next backward.
  Tensor& retain_grad();
  /// Shares storage, with no history and requires_grad false.
  Tensor detach() const;
  /// Runs backward from this tensor; `grad` may be omitted for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// Runs `hook(param)` once this leaf's gradient is final in a backward (after
  /// accumulation), until the returned handle is destroyed or removed.
  HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  /// A hook on a leaf that runs when a backward has its gradient and is about to add it into
  /// .grad, with the leaf (its .grad still as before): ZeRO-1 turns an averaged gradient
  /// back into a sum there so the next average counts it once.
  HookHandle register_pre_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  std::shared_ptr<autograd::Node> grad_fn() const { return impl()->grad_fn; }

  // ---- sharding ----
  /// The part of a larger logical tensor this tensor holds, or null when it is whole.
  const Region* region() const { return impl()->region.get(); }
  /// Records that this tensor holds region `r` of a logical tensor; its shape must be
  /// r.local_shape(). A whole region clears it.
  void set_region(const Region& r);

  /// "Tensor(f32, [2, 3])".
  std::string describe() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// Token ids, class labels or indices as a contiguous i64 tensor (i32 widened, i64 as is); any
/// other dtype is a DTypeError that names `what` ("embedding: ids", ...).
Tensor as_indices(const Tensor& t, const std::string& what);

/// Creates a tensor of `shape` viewing base's storage with explicit strides (no autograd).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace booster
