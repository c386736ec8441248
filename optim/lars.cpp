// Lars update (see lars.h).
#include "optim/lars.h"

#include <algorithm>
#include <cmath>

namespace booster::optim {

Lars::Lars(std::vector<ParamGroup> groups, const LarsOptions& o)
    : Optimizer("Lars", std::move(groups), {{"lr", o.lr},
                                    {"momentum", o.momentum},
                                    {"eeta", o.eeta},
                                    {"weight_decay", o.weight_decay},
                                    {"epsilon", o.epsilon},
                                    {"lars_adaptation", 1.0}}) {
  BOOSTER_CHECK(o.eeta > 0, "Lars: eeta (the trust coefficient) must be > 0, got ", o.eeta);
}

void Lars::update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                  const Tensor& /*working: not fused*/) {
  std::vector<double> sums = layer_sums(name, p, g, st, group);
  complete_sums(name, sums);  // over a tensor-parallel parameter's blocks
  layer_apply(name, p, g, st, group, sums);
}

std::vector<double> Lars::layer_sums(const std::string&, Tensor& p, const Tensor& g, ParamState&, const ParamGroup&) {
  const int64_t n = p.numel();
  const float* pp = p.data<float>();
  const float* pg = g.data<float>();
  const double inv_div = 1.0 / grad_divisor_;
  double wnorm2 = 0, gnorm2 = 0;
#pragma omp parallel for simd reduction(+ : wnorm2, gnorm2) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const double gi = double(pg[i]) * inv_div;
    wnorm2 += double(pp[i]) * pp[i];
    gnorm2 += gi * gi;
  }
  return {wnorm2, gnorm2};
}

void Lars::layer_apply(const std::string&, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                       const std::vector<double>& sums) {
  Tensor& buf = st.buffers["momentum_buffer"];
  if (!buf.defined()) buf = Tensor::zeros(p.shape());
  const bool adapt = group.get("lars_adaptation") != 0.0;
  const double lr = group.get("lr"), momentum = group.get("momentum"), eeta = group.get("eeta");
  const double wd = adapt ? group.get("weight_decay") : 0.0, eps = group.get("epsilon"), inv_div = 1.0 / grad_divisor_;
  const double wn = std::sqrt(sums[0]), gn = std::sqrt(sums[1]);
  double trust = 1.0;
  if (adapt && wn > 0 && gn > 0) trust = std::clamp(eeta * wn / (gn + wd * wn + eps), 0.0, 50.0);
  const int64_t n = p.numel();
  float* pp = p.data<float>();
  float* pb = buf.data<float>();
  const float* pg = g.data<float>();
  const float f_wd = float(wd), f_m = float(momentum), step = float(lr * trust), f_div = float(inv_div);
#pragma omp parallel for simd if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const float gi = std::clamp(pg[i] * f_div + f_wd * pp[i], -10.0f, 10.0f);
    pb[i] = f_m * pb[i] + gi;
    pp[i] -= step * pb[i];
  }
}

std::vector<ParamGroup> lars_param_groups(const NamedParams& params, double weight_decay) {
  return param_groups_no_decay(params, weight_decay, {}, {{"lars_adaptation", 0.0}});
}

}  // namespace booster::optim
