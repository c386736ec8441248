// SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD semantics).
#pragma once

#include "optim/optimizer.h"

namespace booster::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(const NamedParams& params, const SGDOptions& o) : SGD(std::vector<ParamGroup>{{params, {}}}, o) {}
  SGD(std::vector<ParamGroup> groups, const SGDOptions& o);
  int state_buffers() const override {
    for (auto& g : param_groups())
      if (g.get("momentum") != 0) return 1;
    return 0;
  }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
              const Tensor& working) override;
};

}  // namespace booster::optim
