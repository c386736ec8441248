// Module: a named registry of children, parameters and buffers. A parent's typed member
// is a Slot that points into its registry cell, and forward() always calls through the
// slot, so replace("a.b.c", m) takes effect in the parent's forward at once. Parameters
// are Tensor handles (identity survives resharding) walked from the registry on every call.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::nn {

class Module;

namespace detail {
/// One registered child: its name, the module, and what kind of module it accepts.
struct ChildCell {
  std::string name;
  std::shared_ptr<Module> module;
  std::function<bool(const Module&)> accepts;
  std::string kind;  // the C++ type the slot was declared with, e.g. "Linear"
};
/// One registered tensor (parameter or buffer).
struct TensorCell {
  std::string name;
  Tensor tensor;
};
}  // namespace detail

/// A typed view of a registry cell: always returns what the registry holds now.
template <typename T>
class Slot {
 public:
  Slot() = default;
  explicit Slot(detail::ChildCell* cell) : cell_(cell) {}
  T* get() const { return static_cast<T*>(cell_->module.get()); }
  T* operator->() const { return get(); }
  T& operator*() const { return *get(); }
  explicit operator bool() const { return cell_ && cell_->module; }
  std::shared_ptr<Module> shared() const { return cell_->module; }

 private:
  detail::ChildCell* cell_ = nullptr;
};

/// A view of a parameter or buffer cell.
class TensorSlot {
 public:
  TensorSlot() = default;
  explicit TensorSlot(detail::TensorCell* cell) : cell_(cell) {}
  const Tensor& get() const { return cell_->tensor; }
  operator const Tensor&() const { return cell_->tensor; }
  const Tensor* operator->() const { return &cell_->tensor; }
  bool defined() const { return cell_ && cell_->tensor.defined(); }

 private:
  detail::TensorCell* cell_ = nullptr;
};

/// Result of load_state_dict: what did not line up, by name.
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  std::vector<std::string> mismatched;  // "name: checkpoint [a, b] vs model [c, d]"
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && mismatched.empty(); }
};

/// Ordered name -> tensor map (state dicts keep registration order).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

/// Base of every layer and model.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class name, e.g. "Linear", "ViTLayer".
  virtual std::string type_name() const = 0;

  // ---- walking the registry (every call walks it anew) ----
  /// All parameters with dotted names, depth first in registration order.
  StateDict named_parameters(bool recurse = true) const;
  /// All parameters.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// All buffers with dotted names.
  StateDict named_buffers(bool recurse = true) const;
  /// This module ("") and every descendant with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  /// Direct children.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// The module at a dotted path ("" is this); throws ValueError naming the missing part.
  std::shared_ptr<Module> get(const std::string& path) const;
  /// The parameter or buffer at a dotted path; throws ValueError if none.
  Tensor get_tensor(const std::string& path) const;

  // ---- rewriting ----
  /// Replaces the module at `path`; refused (ValueError naming path and both types) when
  /// the slot's declared kind does not accept it.
  void replace(const std::string& path, std::shared_ptr<Module> module);
  /// Rebinds the parameter or buffer cell at a dotted path to another tensor handle.
  void replace_tensor(const std::string& path, const Tensor& t);

  // ---- modes ----
  /// Sets training mode on this module and every descendant.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- state ----
  /// Parameters and buffers by dotted name (sharing storage with the module).
  StateDict state_dict() const;
  /// Copies tensors in by name. strict: any missing, unexpected or mismatched key is a
  /// ValueError listing all of them; otherwise they are returned and the rest is loaded.
  LoadResult load_state_dict(const StateDict& sd, bool strict = true);
  /// A deep copy: same structure (including replaced children), copied tensors.
  std::shared_ptr<Module> clone() const;
  /// Sets requires_grad on every parameter (freezing with false).
  void requires_grad_(bool on);
  /// Clears every parameter's gradient (set_to_none) or zeroes it.
  void zero_grad(bool set_to_none = true);

 protected:
  /// Registers a child under `name`; the returned slot accepts T and its subclasses.
  template <typename T>
  Slot<T> register_module(const std::string& name, std::shared_ptr<T> module) {
    auto* cell = add_child(name, std::move(module), [](const Module& m) { return dynamic_cast<const T*>(&m) != nullptr; },
                           kind_name<T>());
    return Slot<T>(cell);
  }
  /// Registers a parameter (a leaf that requires grad unless told otherwise).
  TensorSlot register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Registers a buffer (state that is saved but not trained).
  TensorSlot register_buffer(const std::string& name, Tensor t);

  /// A new module of the same type and configuration (children and tensors are then
  /// overwritten by clone()).
  virtual std::shared_ptr<Module> fresh() const = 0;

  detail::ChildCell* add_child(const std::string& name, std::shared_ptr<Module> m,
                               std::function<bool(const Module&)> accepts, std::string kind);

 private:
  template <typename T>
  static std::string kind_name();
  detail::ChildCell* find_child(const std::string& name) const;
  detail::TensorCell* find_tensor(const std::string& name, bool* is_param) const;
  void walk_tensors(const std::string& prefix, bool params, bool recurse, StateDict& out) const;
  void copy_into(Module& dst) const;

  std::vector<std::unique_ptr<detail::ChildCell>> children_;
  std::vector<std::unique_ptr<detail::TensorCell>> params_;
  std::vector<std::unique_ptr<detail::TensorCell>> buffers_;
  bool training_ = true;
};

/// Type name used in error messages for a slot's declared kind.
std::string demangle(const char* mangled);

template <typename T>
std::string Module::kind_name() {
  return demangle(typeid(T).name());
}

/// A module with one tensor in and one out (layers that fit Sequential).
class UnaryModule : public Module {
 public:
  /// Runs the layer.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

/// Skips parameter initialization while alive (clone() and from_pretrained overwrite it).
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  /// True while a guard is alive on this thread.
  static bool active();

 private:
  bool prev_;
};

}  // namespace booster::nn
