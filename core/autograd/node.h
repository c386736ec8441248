// Graph nodes of the define-by-run autograd: one per op application that needs a
// backward, plus one AccumulateGrad per leaf that requires grad.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::autograd {

class Node;

/// Where a gradient goes: input `input_nr` of node `fn` (fn null: nowhere).
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
};

/// Shape and dtype a node's input gradient must have (checked by the engine).
struct InputMeta {
  Shape shape;
  DType dtype;
};

/// A backward step: receives the gradients of its forward outputs, returns the gradients
/// of its forward inputs, in the order of next_edges.
class Node {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;

  /// Computes input gradients from output gradients.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  /// Frees what the forward saved; later apply() calls must fail loudly.
  virtual void release() {}
  /// True once release() ran.
  virtual bool released() const { return false; }

  const std::string& name() const { return name_; }
  /// Creation order; the engine runs ready nodes newest first.
  uint64_t sequence_nr() const { return seq_; }

  std::vector<Edge> next_edges;
  std::vector<InputMeta> input_meta;  // per next edge
  int num_outputs = 1;
  std::vector<std::weak_ptr<TensorImpl>> retained;  // outputs that retain_grad()
  /// False for a node whose backward runs other nodes, each timed by the profiler on its
  /// own (nn::split_batch's): not timed again as a whole.
  bool timed = true;

 protected:
  uint64_t seq_;

 private:
  std::string name_;
};

/// Backward function of a recorded op.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

/// A node whose backward is a closure capturing what its forward saved.
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : Node(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release() override {
    fn_ = nullptr;
    released_ = true;
  }
  bool released() const override { return released_; }

 private:
  BackwardFn fn_;
  bool released_ = false;
};

/// Sink for a leaf: adds the incoming gradient into leaf.grad, then runs its hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

/// The edge that carries a gradient into tensor t (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);

}  // namespace booster::autograd
