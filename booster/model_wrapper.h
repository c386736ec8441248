// What users hold after boost(): a model wrapper whose call passes through to the module
// (after the plugin's pre-forward step), and unwrap() for the module itself.
#pragma once

#include <functional>
#include <type_traits>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace booster {

/// The untyped part plugins work with.
class BoostedModel {
 public:
  explicit BoostedModel(std::shared_ptr<nn::Module> module) : module_(std::move(module)) {}
  virtual ~BoostedModel() = default;
  /// The module.
  std::shared_ptr<nn::Module> module() const { return module_; }
  /// Adds a step run before every forward (e.g. DDP's buffer broadcast).
  void add_pre_forward(std::function<void()> fn) { pre_forward_.push_back(std::move(fn)); }
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }

  /// What a checkpoint stores: the full-precision state (mixed precision substitutes its
  /// fp32 masters for the low-precision parameters).
  nn::StateDict checkpoint_state() const { return state_hook_ ? state_hook_() : module_->state_dict(); }
  /// Loads a checkpoint's state (into the masters too, under mixed precision).
  nn::LoadResult load_checkpoint_state(const nn::StateDict& sd, bool strict) {
    return load_hook_ ? load_hook_(sd, strict) : module_->load_state_dict(sd, strict);
  }
  void set_checkpoint_hooks(std::function<nn::StateDict()> state,
                            std::function<nn::LoadResult(const nn::StateDict&, bool)> load) {
    state_hook_ = std::move(state);
    load_hook_ = std::move(load);
  }
  /// Floating tensor arguments are cast to this dtype on the way in (mixed precision's
  /// cast_inputs); f32 means no cast.
  void set_input_dtype(DType t) { input_dtype_ = t; }

 protected:
  void pre_forward() {
    for (auto& f : pre_forward_) f();
  }
  template <typename A>
  decltype(auto) cast_input(A&& a) const {
    if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
      return a.defined() && is_floating(a.dtype()) && input_dtype_ != DType::f32 ? a.to(input_dtype_) : Tensor(a);
    } else {
      return std::forward<A>(a);
    }
  }

 private:
  std::shared_ptr<nn::Module> module_;
  std::vector<std::function<void()>> pre_forward_;
  std::function<nn::StateDict()> state_hook_;
  std::function<nn::LoadResult(const nn::StateDict&, bool)> load_hook_;
  DType input_dtype_ = DType::f32;
};

/// Typed model wrapper: model(args...) calls M::forward(args...).
template <typename M>
class ModelWrapper : public BoostedModel {
 public:
  explicit ModelWrapper(std::shared_ptr<M> m) : BoostedModel(m), typed_(std::move(m)) {}
  /// The wrapped module (Colossal-AI: ModelWrapper.unwrap()).
  std::shared_ptr<M> unwrap() const { return typed_; }
  template <typename... Args>
  auto operator()(Args&&... args) {
    pre_forward();
    return typed_->forward(cast_input(std::forward<Args>(args))...);
  }
  M* operator->() const { return typed_.get(); }

 private:
  std::shared_ptr<M> typed_;
};

}  // namespace booster
