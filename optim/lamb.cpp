// Lamb update: two passes (moments and the norms of p and the step u, then the scaled update,
// u computed again from the moments: nothing of a parameter's size is kept between them).
#include "optim/lamb.h"

#include <cmath>
#include <vector>

#include "core/common/parallel.h"

namespace booster::optim {

Lamb::Lamb(std::vector<ParamGroup> groups, const LambOptions& o)
    : Optimizer("Lamb", std::move(groups), {{"lr", o.lr},
                                    {"beta1", o.beta1},
                                    {"beta2", o.beta2},
                                    {"eps", o.eps},
                                    {"weight_decay", o.weight_decay},
                                    {"adam", o.adam ? 1.0 : 0.0},
                                    {"bias_correction", o.bias_correction ? 1.0 : 0.0}}) {
  BOOSTER_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Lamb: betas must be in [0, 1)");
}

void Lamb::update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                  const Tensor& /*working: not fused*/) {
  std::vector<double> sums = layer_sums(name, p, g, st, group);
  complete_sums(name, sums);  // over a tensor-parallel parameter's blocks
  layer_apply(name, p, g, st, group, sums);
}

std::vector<double> Lamb::layer_sums(const std::string&, Tensor& p, const Tensor& g, ParamState& st,
                                     const ParamGroup& group) {
  Tensor& m = st.buffers["exp_avg"];
  Tensor& v = st.buffers["exp_avg_sq"];
  if (!m.defined()) m = Tensor::zeros(p.shape());
  if (!v.defined()) v = Tensor::zeros(p.shape());
  const float eps = float(group.get("eps")), wd = float(group.get("weight_decay")), inv_div = float(1.0 / grad_divisor_);
  const double b1 = group.get("beta1"), b2 = group.get("beta2");
  const int64_t n = p.numel();
  const float* pp = p.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const float* pg = g.data<float>();
  const float f_b1 = float(b1), f_b2 = float(b2), f_1mb1 = float(1 - b1), f_1mb2 = float(1 - b2);
  double wnorm2 = 0, unorm2 = 0;
#pragma omp parallel for simd reduction(+ : wnorm2, unorm2) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const float gi = pg[i] * inv_div;
    const float mi = pm[i] * f_b1 + f_1mb1 * gi;
    const float vi = pv[i] * f_b2 + f_1mb2 * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    const float ui = mi / (std::sqrt(vi) + eps) + wd * pp[i];
    wnorm2 += double(pp[i]) * pp[i];
    unorm2 += double(ui) * ui;
  }
  return {wnorm2, unorm2};
}

void Lamb::layer_apply(const std::string&, Tensor& p, const Tensor&, ParamState& st, const ParamGroup& group,
                       const std::vector<double>& sums) {
  const double lr = group.get("lr"), b1 = group.get("beta1"), b2 = group.get("beta2");
  const float eps = float(group.get("eps")), wd = float(group.get("weight_decay"));
  double step_size = lr;
  if (group.get("bias_correction") != 0.0)
    step_size = lr * std::sqrt(1 - std::pow(b2, double(st.step))) / (1 - std::pow(b1, double(st.step)));
  const double wn = std::sqrt(sums[0]), un = std::sqrt(sums[1]);
  const double trust = (wn == 0 || un == 0 || group.get("adam") != 0.0) ? 1.0 : wn / un;
  const float alpha = float(step_size * trust);
  const float* pm = st.buffers.at("exp_avg").data<float>();
  const float* pv = st.buffers.at("exp_avg_sq").data<float>();
  float* pp = p.data<float>();
  parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) pp[i] -= alpha * (pm[i] / (std::sqrt(pv[i]) + eps) + wd * pp[i]);  // u again, as summed
  });
}

std::vector<ParamGroup> lamb_param_groups(const NamedParams& params, double weight_decay,
                                          bool exclude_from_layer_adaptation) {
  return param_groups_no_decay(params, weight_decay, {},
                               exclude_from_layer_adaptation ? std::map<std::string, double>{{"adam", 1.0}}
                                                             : std::map<std::string, double>{});
}

}  // namespace booster::optim
