// What users hold after boost(): a model wrapper whose call passes through to the module
// (after the plugin's pre-forward step), and unwrap() for the module itself.
#pragma once

#include <functional>
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

 protected:
  void pre_forward() {
    for (auto& f : pre_forward_) f();
  }

 private:
  std::shared_ptr<nn::Module> module_;
  std::vector<std::function<void()>> pre_forward_;
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
    return typed_->forward(std::forward<Args>(args)...);
  }
  M* operator->() const { return typed_.get(); }

 private:
  std::shared_ptr<M> typed_;
};

}  // namespace booster
