// Dropout under tensor parallelism (Colossal-AI's DropoutForReplicatedInput and
// DropoutForParallelInput). A replicated activation must drop the same elements on every
// tensor-parallel rank, a split one different elements: each layer draws from a generator
// the plugin seeds alike over the tp group (replicated) or per tp rank (parallel).
#pragma once

#include <memory>

#include "core/tensor/random.h"
#include "nn/activation_checkpoint.h"
#include "nn/layers.h"

namespace booster::nn {

class TPDropout : public UnaryModule, public RandomModule {
 public:
  /// p from `native` (a Dropout); draws from `gen`.
  TPDropout(double p, std::shared_ptr<Generator> gen, bool parallel_input);
  std::string type_name() const override {
    return parallel_ ? "DropoutForParallelInput" : "DropoutForReplicatedInput";
  }
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training(), *gen_); }
  double p() const { return p_; }
  std::vector<std::shared_ptr<Generator>> generators() const override { return {gen_}; }
  /// Builds one from a Dropout (a TPDropout is returned as is).
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         std::shared_ptr<Generator> gen, bool parallel_input);

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<TPDropout>(p_, gen_, parallel_); }
  double p_;
  std::shared_ptr<Generator> gen_;
  bool parallel_;
};

}  // namespace booster::nn
