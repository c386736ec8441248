// The backward split in two, as zero-bubble pipelines run it (Qi et al., "Zero Bubble
// Pipeline Parallelism"; Colossal-AI's ZeroBubbleVPipeScheduler): B computes the gradients
// of a stage's inputs, which the previous stage waits for; W computes the weights'
// gradients later, where the schedule has a bubble to fill. While a WeightGradStore collects
// on a thread (a StoreWeightGrads scope), the ops whose weight gradient is a product of its
// own (linear, stacked_linear) compute the input gradient only and hand that product to the
// store; the rest of the backward (norms' and biases' small reductions, embeddings' rows) runs
// as usual. run() computes the products and adds each into its weight's .grad through the
// weight's accumulator, so the gradient hooks fire then, inside a backward pass of its own.
// A backward that collects into given inputs (autograd::grad) never defers: its caller
// reads the gradients it returns.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::autograd {

class WeightGradStore {
 public:
  /// A deferred product: (weight, its gradient) pairs (a gradient may be undefined: none).
  using Job = std::function<std::vector<std::pair<Tensor, Tensor>>()>;
  WeightGradStore() = default;
  WeightGradStore(WeightGradStore&&) = default;
  WeightGradStore& operator=(WeightGradStore&&) = default;

  void add(Job job) { jobs_.push_back(std::move(job)); }
  bool empty() const { return jobs_.empty(); }
  size_t size() const { return jobs_.size(); }
  /// Computes every deferred product, in the order deferred, and accumulates each into its
  /// weight (hooks and queue_callback as in a backward pass); the store is empty after.
  void run();

 private:
  std::vector<Job> jobs_;
};

/// The store collecting on this thread, or null (ops then compute weight gradients at once).
WeightGradStore* collecting_weight_grads();

/// Makes `store` collect the weight products of the backwards run on this thread while alive.
class StoreWeightGrads {
 public:
  explicit StoreWeightGrads(WeightGradStore* store);
  ~StoreWeightGrads();
  StoreWeightGrads(const StoreWeightGrads&) = delete;
  StoreWeightGrads& operator=(const StoreWeightGrads&) = delete;

 private:
  WeightGradStore* prev_;
};

/// True when an op's weight gradient may go to the store: one collects, and `w` is a leaf
/// that requires grad (a weight computed from others passes its gradient on at once).
bool defer_weight_grad(const Tensor& w);

}  // namespace booster::autograd
