// The model side of boost(). ModelWrapper is the base of every plugin's model wrapper
// (Colossal-AI's ModelWrapper; TorchDDPModel and the others subclass it): it holds the
// module, or the wrapper it decorates (mixed precision around DDP), and says what a
// checkpoint of the model holds on this rank. BoostedModel<M> is the typed handle boost()
// returns: it holds exactly the plugin's wrapper and calls M::forward through it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor/tensor_map.h"
#include "nn/batch_split.h"
#include "nn/module.h"
#include "nn/pipeline.h"

namespace booster {

class GradSync;

/// One tensor of a rank's checkpointed state: its logical name, its region of the logical
/// tensor, and the local tensor holding that region (saved from, and loaded into), or the
/// source that holds it on the disk tier.
struct StateTensor {
  /// State kept on the disk tier: fetch() gives its data in RAM while a save reads it,
  /// give_back() returns it; a load reads into a tensor of `shape` and hands it to
  /// fill(), which writes it back without reading the old values. A save or load holds one
  /// at a time, so state that does not fit in RAM is saved and loaded all the same.
  struct Source {
    DType dtype;
    Shape shape;
    std::function<Tensor()> fetch;
    std::function<void()> give_back;
    std::function<void(const Tensor&)> fill;
  };
  std::string name;
  Tensor tensor;  // undefined when `source` holds the data
  Region region;
  std::shared_ptr<const Source> source = nullptr;

  DType dtype() const { return tensor.defined() || !source ? tensor.dtype() : source->dtype; }
};
using ShardedState = std::vector<StateTensor>;

/// A StateTensor's data in RAM for a scope (fetched from its source, if any, and given back
/// at the end).
class HeldState {
 public:
  explicit HeldState(const StateTensor& st)
      : st_(st), data_(st.tensor.defined() || !st.source ? st.tensor : st.source->fetch()) {}
  ~HeldState() {
    if (!st_.tensor.defined() && st_.source) st_.source->give_back();
  }
  HeldState(const HeldState&) = delete;
  HeldState& operator=(const HeldState&) = delete;
  const Tensor& data() const { return data_; }

 private:
  const StateTensor& st_;
  Tensor data_;
};

/// The outermost link of type W in a chain of wrappers from `w` inward, or null.
template <typename W, typename Link>
W* find_in_chain(Link* w) {
  for (; w; w = w->inner().get())
    if (auto* hit = dynamic_cast<W*>(w)) return hit;
  return nullptr;
}

class ModelWrapper : public std::enable_shared_from_this<ModelWrapper> {
 public:
  /// The innermost wrapper: the module itself.
  explicit ModelWrapper(std::shared_ptr<nn::Module> module);
  /// A wrapper decorating another (each plugin or precision layer adds one).
  explicit ModelWrapper(std::shared_ptr<ModelWrapper> inner);
  virtual ~ModelWrapper() = default;
  ModelWrapper(const ModelWrapper&) = delete;
  ModelWrapper& operator=(const ModelWrapper&) = delete;

  /// Class name for messages, e.g. "TorchDDPModel".
  virtual std::string type_name() const { return "ModelWrapper"; }
  /// The wrapped nn::Module (Colossal-AI: model.module / unwrap()).
  std::shared_ptr<nn::Module> module() const { return module_; }
  /// The wrapper this one decorates, or null for the innermost.
  std::shared_ptr<ModelWrapper> inner() const { return inner_; }
  /// The outermost wrapper of type W in the chain from here inward, or null.
  template <typename W>
  W* find() {
    return find_in_chain<W>(this);
  }

  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }

  // ---- the forward protocol (BoostedModel calls it around M::forward) ----
  /// Runs before every forward (DDP broadcasts buffers, ZeRO waits for gathers); the
  /// default runs the inner wrapper's.
  virtual void before_forward();
  /// Throws when the whole model's forward cannot run on this rank (a pipeline stage holds
  /// only its layers); the default asks the inner wrapper.
  virtual void check_whole_forward() const;
  /// Floating inputs are cast to this dtype (mixed precision's cast_inputs); f32: none.
  virtual DType input_dtype() const;
  /// `t` cast to input_dtype() when it is a floating tensor.
  Tensor cast_input(const Tensor& t) const;
  /// Runs one pipeline stage of the model on named tensors (the module must be an
  /// nn::PipelineModule unless the stage is the whole model); floating inputs are cast as
  /// for forward.
  TensorMap stage_forward(const TensorMap& inputs, const nn::StageSpec& stage);
  /// The whole model on named tensors (nn::forward_named: any PipelineModule, MapModule or
  /// UnaryModule), inputs cast and split_batch applied as for stage_forward.
  TensorMap forward_named(const TensorMap& inputs);

  // ---- batch shares over threads (Booster's split_batch) ----
  /// Turns splitting on or off for forwards through this wrapper.
  void set_split_batch(bool on) { split_batch_ = on; }
  bool split_batch() const { return split_batch_; }
  /// How many shares a forward over these inputs runs as: 1 (no split) unless split_batch
  /// is on, history is recorded and there are threads to share; a module with hooks is
  /// refused (they would fire once per share, on the share's thread).
  int split_shares(const std::vector<Tensor>& args) const;
  /// The parameters a split forward computes gradients for.
  std::vector<Tensor> split_params() const;
  /// stage_forward of the whole model over batch shares (nn::split_batch): each output's
  /// rows joined, a scalar output weighted by its share's counted "labels" (index labels
  /// >= 0; else its rows).
  TensorMap split_stage_forward(int shares, const std::vector<std::string>& keys, const std::vector<Tensor>& args,
                                const std::function<TensorMap(const std::vector<Tensor>&)>& forward) const;

  /// The data-parallel gradient synchronization of this model (DDP's reducer, ZeRO's
  /// gradients), or null without one. Default: the inner wrapper's.
  virtual GradSync* grad_sync() const;

  // ---- checkpoints ----
  /// What this rank holds of the model's state, each tensor with its region: what
  /// save_model writes and what load_model fills. Default: the inner wrapper's, or the
  /// module's state_dict with each parameter's region (whole unless a layer sharded it).
  virtual ShardedState checkpoint_state();
  /// Runs after load_model filled checkpoint_state(): refreshes what derives from it
  /// (low-precision working copies, gathered parameters). Default: the inner's.
  virtual void after_load();

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ModelWrapper> inner_;
  bool split_batch_ = false;
};

/// The module's state_dict as StateTensors, with each tensor's region.
ShardedState module_state(const nn::Module& m);

/// What boost() returns for the model: a typed handle on the plugin's wrapper (the object
/// the plugin produced, reachable with wrapper() or operator->). model(args...) runs
/// M::forward through it, with the module's hooks.
template <typename M>
class BoostedModel {
 public:
  BoostedModel() = default;
  explicit BoostedModel(std::shared_ptr<ModelWrapper> wrapper)
      : wrapper_(std::move(wrapper)), typed_(std::dynamic_pointer_cast<M>(wrapper_->module())) {
    BOOSTER_CHECK(typed_ != nullptr, "boost: the plugin replaced the model's root module by a ",
                  wrapper_->module()->type_name(), "; it must keep the user's module and rewrite its children");
  }
  /// M::forward(args...) through the wrapper (inputs cast, plugin steps before forward).
  template <typename... Args>
  auto operator()(Args&&... args) const {
    wrapper_->check_whole_forward();
    wrapper_->before_forward();
    using Out = decltype(typed_->forward(cast(std::forward<Args>(args))...));
    if constexpr (sizeof...(Args) > 0 && (std::is_same_v<std::decay_t<Args>, Tensor> && ...) &&
                  nn::BatchMergeable<Out>) {
      if (wrapper_->split_batch()) {
        const std::vector<Tensor> in{cast(args)...};
        const int shares = wrapper_->split_shares(in);
        if (shares == 1) return forward_on(in, std::index_sequence_for<Args...>{});
        return nn::split_batch_as<Out>(shares, in, wrapper_->split_params(), [&](const std::vector<Tensor>& a) {
          return forward_on(a, std::index_sequence_for<Args...>{});
        });
      }
    }
    return typed_->call_forward([&] { return typed_->forward(cast(std::forward<Args>(args))...); });
  }
  ModelWrapper* operator->() const { return wrapper_.get(); }
  /// The handle itself, so the pointer spelling works too: (*model)(x) runs forward and
  /// booster.save_model(*model, ...) takes the wrapper.
  const BoostedModel& operator*() const { return *this; }
  operator ModelWrapper&() const { return *wrapper_; }
  /// The plugin's wrapper (dynamic_cast it to TorchDDPModel and the like).
  const std::shared_ptr<ModelWrapper>& wrapper() const { return wrapper_; }
  /// The user's module.
  const std::shared_ptr<M>& unwrap() const { return typed_; }

 private:
  template <typename A>
  decltype(auto) cast(A&& a) const {
    if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) return wrapper_->cast_input(a);
    else return std::forward<A>(a);
  }
  // M::forward on a vector of (cast) inputs, with the module's hooks.
  template <size_t... I>
  auto forward_on(const std::vector<Tensor>& a, std::index_sequence<I...>) const {
    return typed_->call_forward([&] { return typed_->forward(a[I]...); });
  }
  std::shared_ptr<ModelWrapper> wrapper_;
  std::shared_ptr<M> typed_;
};

}  // namespace booster
