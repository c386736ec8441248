// SGD update, one fused pass:
// d = g + wd p; buf = momentum buf + (1 - dampening) d (buf = d at the first step);
// d = nesterov ? d + momentum buf : buf; p -= lr d.
#include "optim/sgd.h"

#include "core/common/parallel.h"

namespace booster::optim {

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o)
    : Optimizer("SGD", std::move(groups), {{"lr", o.lr},
                                    {"momentum", o.momentum},
                                    {"dampening", o.dampening},
                                    {"weight_decay", o.weight_decay},
                                    {"nesterov", o.nesterov ? 1.0 : 0.0}}) {
  BOOSTER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                "SGD: nesterov needs a momentum > 0 and zero dampening (as PyTorch)");
}

void SGD::update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group,
                 const Tensor& /*working: not fused*/) {
  const float lr = float(group.get("lr")), mom = float(group.get("momentum")), damp = float(group.get("dampening"));
  const float wd = float(group.get("weight_decay")), inv_div = float(1.0 / grad_divisor_);
  const bool nesterov = group.get("nesterov") != 0.0;
  float* __restrict pp = p.data<float>();
  const float* __restrict pg = g.data<float>();
  const int64_t n = p.numel();
  if (mom == 0) {
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) pp[i] -= lr * (pg[i] * inv_div + wd * pp[i]);
    });
    return;
  }
  Tensor& buf = st.buffers["momentum_buffer"];
  const bool first = !buf.defined();
  if (first) buf = Tensor::zeros(p.shape());
  // buf = c_buf * buf + c_d * d: the first step copies d (PyTorch clones it), later ones
  // apply momentum and dampening. Nesterov looks ahead with nest * buf.
  const float c_buf = first ? 0.f : mom, c_d = first ? 1.f : 1 - damp, nest = nesterov ? mom : 0.f,
              use_buf = nesterov ? 0.f : 1.f, use_d = nesterov ? 1.f : 0.f;
  float* __restrict pb = buf.data<float>();
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float d = pg[i] * inv_div + wd * pp[i];
      const float bi = pb[i] * c_buf + c_d * d;
      pb[i] = bi;
      pp[i] -= lr * (use_d * d + nest * bi + use_buf * bi);
    }
  });
  (void)name;
}

}  // namespace booster::optim
