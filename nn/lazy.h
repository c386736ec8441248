// Lazy initialization (Colossal-AI's LazyInitContext): a model built inside an
// nn::LazyInit scope records each parameter's and buffer's shape, dtype and initializer
// without allocating it. booster.boost() then materializes every tensor straight into what
// its rank keeps (a tensor-parallel slice, a ZeRO or Gemini shard, a pipeline stage's
// layers only), one tensor at a time; without a plugin, nn::materialize gives the eager
// model. The values equal eager initialization's under the same seed: each random
// initializer keeps the generator counters it would have drawn, and any element of the
// draw can be made alone, so they do not depend on the layout.
//
//   std::shared_ptr<ViTForImageClassification> model;
//   {
//     nn::LazyInit lazy;
//     model = std::make_shared<ViTForImageClassification>(config);
//   }
//   auto [m, opt, ...] = booster.boost(model, optimizer, ...);  // or nn::materialize(*model)
#pragma once

#include "core/tensor/lazy.h"
#include "nn/module.h"

namespace booster::nn {

/// Modules built while alive are lazy (the scope is per thread; nestable).
class LazyInit {
 public:
  LazyInit() = default;
  LazyInit(const LazyInit&) = delete;
  LazyInit& operator=(const LazyInit&) = delete;

 private:
  LazyTensorScope scope_;
};

/// Gives every lazy parameter and buffer of m its values, one at a time (in its dtype and
/// region: a tensor a plugin has cut stays its slice). A module without lazy tensors is
/// left as it is.
void materialize(Module& m);
/// True when any parameter or buffer of m is lazy.
bool is_lazy(const Module& m);

}  // namespace booster::nn
