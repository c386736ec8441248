// LARS (You, Gitman and Ginsburg, 2017) with legacy Colossal-AI's signature and defaults:
// per tensor, trust = eeta |w| / (|g| + wd |w| + epsilon) (1 when either norm is 0), clamped
// to [0, 50]; g' = clamp(g + wd w, -10, 10); buf = momentum buf + g'; w -= lr trust buf.
// A group with lars_adaptation = 0 (biases and norms, as the paper excludes them:
// lars_param_groups) takes trust 1 and no weight decay.
#pragma once

#include "optim/optimizer.h"

namespace booster::optim {

struct LarsOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double eeta = 1e-3;  // the trust coefficient
  double weight_decay = 0.0;
  double epsilon = 0.0;
};

class Lars : public Optimizer {
 public:
  Lars(const NamedParams& params, const LarsOptions& o = {}) : Lars(std::vector<ParamGroup>{{params, {}}}, o) {}
  Lars(std::vector<ParamGroup> groups, const LarsOptions& o = {});
  /// The trust ratio needs whole-tensor norms: not for sharded parameters.
  bool elementwise() const override { return false; }
  bool layerwise() const override { return true; }
  int state_buffers() const override { return 1; }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
              const Tensor& working) override;
  std::vector<double> layer_sums(const std::string& name, Tensor& p, const Tensor& g, ParamState& st,
                                 const ParamGroup& group) override;
  void layer_apply(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                   const std::vector<double>& sums) override;
};

/// param_groups_no_decay with the no-decay group (biases, norms, any tensor of one
/// dimension) also excluded from the trust ratio.
std::vector<ParamGroup> lars_param_groups(const NamedParams& params, double weight_decay);

}  // namespace booster::optim
