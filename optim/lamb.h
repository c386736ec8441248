// LAMB as large-batch ViT recipes and Colossal-AI use it: u = m / (sqrt(v) + eps) + wd p,
// trust = |p| / |u| per tensor (1 when either is 0, or with adam = true),
// p -= lr' trust u with lr' = lr sqrt(bc2) / bc1 under bias correction (off by default).
// A group with adam = 1 takes trust 1: lamb_param_groups puts biases and norms there when
// asked (the exclude_from_layer_adaptation of the LAMB authors' TensorFlow optimizer).
#pragma once

#include "optim/optimizer.h"

namespace booster::optim {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool adam = false;
  bool bias_correction = false;
};

/// Colossal-AI's Lamb.
class Lamb : public Optimizer {
 public:
  Lamb(const NamedParams& params, const LambOptions& o = {}) : Lamb(std::vector<ParamGroup>{{params, {}}}, o) {}
  Lamb(std::vector<ParamGroup> groups, const LambOptions& o = {});
  /// The trust ratio needs whole-tensor norms: on shards through step_on_shards.
  bool elementwise() const override { return false; }
  bool layerwise() const override { return true; }
  int state_buffers() const override { return 2; }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
              const Tensor& working) override;
  std::vector<double> layer_sums(const std::string& name, Tensor& p, const Tensor& g, ParamState& st,
                                 const ParamGroup& group) override;
  void layer_apply(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                   const std::vector<double>& sums) override;
};

/// param_groups_no_decay; with `exclude_from_layer_adaptation` the no-decay group (biases,
/// norms, any tensor of one dimension) also takes trust 1 (`adam`), as its weight decay 0:
/// a zero-initialized bias otherwise moves by lr |b| / |u|, slowly while |b| is small.
std::vector<ParamGroup> lamb_param_groups(const NamedParams& params, double weight_decay,
                                          bool exclude_from_layer_adaptation);

}  // namespace booster::optim
