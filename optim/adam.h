// Adam family in one fused, vectorized pass over each parameter buffer:
// Adam (L2 decay, torch.optim.Adam), AdamW (decoupled decay, torch.optim.AdamW) and
// HybridAdam (Colossal-AI's CPUAdam semantics and defaults; adamw_mode selects the decay).
#pragma once

#include "optim/optimizer.h"

namespace booster::optim {

/// Hyperparameters of the Adam family.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
};

/// Shared implementation; `decoupled` chooses AdamW-style decay.
class AdamBase : public Optimizer {
 public:
  AdamBase(std::string type, std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled);
  int state_buffers() const override { return 2; }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
              const Tensor& working) override;
  bool fuses_io() const override { return true; }
  bool decoupled_;
};

/// torch.optim.Adam (weight decay added to the gradient).
class Adam : public AdamBase {
 public:
  Adam(const NamedParams& params, const AdamOptions& o = {}) : Adam(std::vector<ParamGroup>{{params, {}}}, o) {}
  Adam(std::vector<ParamGroup> groups, const AdamOptions& o = {}) : AdamBase("Adam", std::move(groups), o, false) {}
};

/// torch.optim.AdamW (decoupled weight decay; PyTorch's default weight_decay 0.01).
class AdamW : public AdamBase {
 public:
  static AdamOptions defaults() {
    AdamOptions o;
    o.weight_decay = 0.01;
    return o;
  }
  AdamW(const NamedParams& params, const AdamOptions& o = defaults()) : AdamW(std::vector<ParamGroup>{{params, {}}}, o) {}
  AdamW(std::vector<ParamGroup> groups, const AdamOptions& o = defaults()) : AdamBase("AdamW", std::move(groups), o, true) {}
};

/// Colossal-AI's HybridAdam on CPU: CPUAdam's update, adamw_mode = true by default,
/// weight_decay 0, eps 1e-8, bias correction on.
class HybridAdam : public AdamBase {
 public:
  HybridAdam(const NamedParams& params, const AdamOptions& o = {}, bool adamw_mode = true)
      : HybridAdam(std::vector<ParamGroup>{{params, {}}}, o, adamw_mode) {}
  HybridAdam(std::vector<ParamGroup> groups, const AdamOptions& o = {}, bool adamw_mode = true)
      : AdamBase("HybridAdam", std::move(groups), o, adamw_mode) {}
  bool adamw_mode() const { return decoupled_; }
};

}  // namespace booster::optim
