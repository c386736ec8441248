// Module: a named registry of children, parameters, buffers and attributes. A parent's
// typed member is a Slot that points into its registry cell, typed by the interface the
// parent calls (UnaryModule, ...), and forward() always calls through the slot, which
// dispatches virtually and runs the child's hooks: replace("a.b.c", m) takes effect in
// the parent's forward at once, at any depth. Parameters are Tensor handles (identity
// survives resharding) walked from the registry on every call.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "core/autograd/engine.h"
#include "core/common/hook_handle.h"
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
/// slot(args...) runs the child's forward with its hooks (call it that way in forwards);
/// slot->forward(args...) runs the bare forward.
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
  /// The child as its slot's type (a replacement adopting another module's children).
  std::shared_ptr<T> typed() const { return std::static_pointer_cast<T>(cell_->module); }
  /// The child's forward, with its hooks.
  template <typename... A>
  auto operator()(A&&... args) const;

 private:
  detail::ChildCell* cell_ = nullptr;
};

/// A module attribute a policy may change by name (e.g. heads per rank).
using Attribute = std::variant<int64_t, double, bool, std::string>;

/// What module hooks receive.
using ModuleHook = std::function<void(Module&)>;

/// Calls f on every tensor of a forward's output; overload visit_tensors for output structs
/// (found by argument-dependent lookup). Other types have no tensors to visit.
inline void visit_tensors(Tensor& t, const std::function<void(Tensor&)>& f) {
  if (t.defined()) f(t);
}
inline void visit_tensors(std::map<std::string, Tensor>& m, const std::function<void(Tensor&)>& f) {
  for (auto& [k, t] : m)
    if (t.defined()) f(t);
}
/// Output types without an overload: a backward-pre hook cannot see their tensors.
template <typename T>
void visit_tensors(T&, const std::function<void(Tensor&)>&) {
  BOOSTER_THROW(ValueError, "a backward-pre hook is registered on a module whose forward returns a type without a "
                            "visit_tensors overload, so its gradients cannot be seen");
}

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

  // ---- attributes ----
  /// Sets the attribute at a dotted path ("attention.attention.num_attention_heads");
  /// ValueError naming the path when there is none or the value's type differs.
  void set_attribute(const std::string& path, const Attribute& value);
  /// The attribute at a dotted path.
  Attribute attribute(const std::string& path) const;
  /// Names of this module's own attributes.
  std::vector<std::string> attribute_names() const;

  // ---- hooks (each returns a handle that removes it) ----
  /// Runs before this module's forward (called through a slot or operator()).
  HookHandle register_forward_pre_hook(ModuleHook hook);
  /// Runs after this module's forward.
  HookHandle register_forward_hook(ModuleHook hook);
  /// Runs when backward reaches this module's outputs, before any op inside it runs its
  /// backward (so before its parameters are used there); once per backward pass.
  HookHandle register_backward_pre_hook(ModuleHook hook);
  /// Runs `f`, a forward of this module, with its hooks around it.
  template <typename F>
  auto call_forward(F&& f);
  /// True when any hook is registered on this module (not counting its children's).
  bool has_hooks() const { return hooks_ && !hooks_->empty(); }

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
  /// Registers a member as a named attribute (it must outlive nothing: it is a member).
  template <typename T>
  void register_attribute(const std::string& name, T* member) {
    attributes_.emplace_back(name, AttrPtr(member));
  }

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

  using AttrPtr = std::variant<int64_t*, double*, bool*, std::string*>;
  struct Hooks {
    HookList<ModuleHook> forward_pre, forward, backward_pre;
    bool empty() const { return forward_pre.empty() && forward.empty() && backward_pre.empty(); }
  };
  HookHandle add_hook(HookList<ModuleHook> Hooks::*list, ModuleHook hook);
  template <typename T>
  void attach_backward_pre(T& out);

  std::vector<std::pair<std::string, AttrPtr>> attributes_;
  std::shared_ptr<Hooks> hooks_;
  std::vector<std::unique_ptr<detail::ChildCell>> children_;
  std::vector<std::unique_ptr<detail::TensorCell>> params_;
  std::vector<std::unique_ptr<detail::TensorCell>> buffers_;
  bool training_ = true;
};

/// Names the lazy tensors of m (core/tensor/lazy.h) by their dotted paths under `prefix`,
/// for errors; modules do it as they register children.
void name_lazy_tensors(const Module& m, const std::string& prefix);

/// Type name used in error messages for a slot's declared kind.
std::string demangle(const char* mangled);

template <typename T>
std::string Module::kind_name() {
  return demangle(typeid(T).name());
}

template <typename F>
auto Module::call_forward(F&& f) {
  if (!hooks_ || hooks_->empty()) return f();
  hooks_->forward_pre.fire(*this);
  auto out = f();
  if (!hooks_->backward_pre.empty()) attach_backward_pre(out);
  hooks_->forward.fire(*this);
  return out;
}

template <typename T>
void Module::attach_backward_pre(T& out) {
  // One firing per backward pass however many outputs the gradient arrives through.
  std::weak_ptr<Hooks> weak = hooks_;
  auto last = std::make_shared<uint64_t>(UINT64_MAX);
  auto self = weak_from_this();
  Module* raw = this;
  visit_tensors(out, [&](Tensor& t) {
    t = autograd::on_gradient(t, [weak, last, self, raw] {
      auto h = weak.lock();
      if (!h || *last == autograd::backward_pass_id()) return;
      *last = autograd::backward_pass_id();
      auto keep = self.lock();  // alive while its hooks run
      h->backward_pre.fire(*raw);
    });
  });
}

template <typename T>
template <typename... A>
auto Slot<T>::operator()(A&&... args) const {
  T* m = get();
  return m->call_forward([&] { return m->forward(std::forward<A>(args)...); });
}

/// A module with one tensor in and one out (layers that fit Sequential).
class UnaryModule : public Module {
 public:
  /// Runs the layer.
  virtual Tensor forward(const Tensor& x) = 0;
  /// Runs the layer with its hooks.
  Tensor operator()(const Tensor& x) {
    return call_forward([&] { return forward(x); });
  }
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

/// The module a replacement adopts, as T (a from_native_module's check): another type is
/// refused naming the replacement (`who`), the type it expects (`expected`, e.g. "a Linear")
/// and the one it got.
template <typename T>
T& native_as(const std::shared_ptr<Module>& native, const std::string& who, const char* expected) {
  auto* m = dynamic_cast<T*>(native.get());
  BOOSTER_CHECK(m != nullptr, who, ".from_native_module: expects ", expected, ", got a ",
                native ? native->type_name() : "null module");
  return *m;
}

}  // namespace booster::nn
