// Activation checkpointing (torch.utils.checkpoint, Hugging Face's gradient checkpointing):
// a module's forward runs without keeping its activations; only its input and the states of
// the generators it draws from are kept, and backward runs the forward again (with the same
// random draws: dropout masks match) before going through it. Memory per checkpointed layer
// falls from all its activations to its input, for about one more forward per step.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor/random.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace booster::nn {

/// A module that draws from generators of its own (not the default one): checkpointing
/// saves and restores their states around the recomputation.
class RandomModule {
 public:
  virtual ~RandomModule() = default;
  virtual std::vector<std::shared_ptr<Generator>> generators() const = 0;
};

/// m(x) (with m's hooks), keeping only x: backward runs m(x) again, then its backward.
/// The result carries one node whose gradients go to x and to m's parameters (each
/// parameter's own accumulator, so data-parallel and ZeRO hooks see them as usual). Without
/// grad mode it is plain m(x).
Tensor checkpoint(UnaryModule& m, const Tensor& x);

/// Hugging Face's gradient checkpointing of a stack of layers: layers [begin, end) on x, the
/// first `ratio` share of them checkpointed while `training` when `enabled`. `who` names the
/// stack in errors.
Tensor run_layers(const ModuleList<UnaryModule>& layers, const Tensor& x, int64_t begin, int64_t end, bool enabled,
                  double ratio, bool training, const char* who);

}  // namespace booster::nn
