// SGD update, one fused pass:
// d = g + wd p; buf = momentum buf + (1 - dampening) d (buf = d at the first step);
// d = nesterov ? d + momentum buf : buf; p -= lr d.
#include "optim/sgd.h"

#include "core/kernels/op_util.h"

namespace booster::optim {

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o)
    : Optimizer("SGD", std::move(groups), {{"lr", o.lr},
                                    {"momentum", o.momentum},
                                    {"dampening", o.dampening},
                                    {"weight_decay", o.weight_decay},
                                    {"nesterov", o.nesterov ? 1.0 : 0.0}}) {
  BOOSTER_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, "SGD: lr, momentum and weight_decay must be >= 0");
  BOOSTER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                "SGD: nesterov needs a momentum > 0 and zero dampening (as PyTorch)");
}

void SGD::update(const std::string& name, Tensor& p, const Tensor& g, ParamState& st, const ParamGroup& group) {
  const float lr = float(group.get("lr")), mom = float(group.get("momentum")), damp = float(group.get("dampening"));
  const float wd = float(group.get("weight_decay")), inv_div = float(1.0 / grad_divisor_);
  const bool nesterov = group.get("nesterov") != 0.0;
  float* pp = p.data<float>();
  const float* pg = g.data<float>();
  float* pb = nullptr;
  bool first = false;
  if (mom != 0) {
    Tensor& buf = st.buffers["momentum_buffer"];
    if (!buf.defined()) {
      buf = Tensor::zeros(p.shape());
      first = true;
    }
    pb = buf.data<float>();
  }
  kernels::parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      float d = pg[i] * inv_div;
      if (wd != 0) d += wd * pp[i];
      if (pb) {
        const float bi = first ? d : pb[i] * mom + (1 - damp) * d;
        pb[i] = bi;
        d = nesterov ? d + mom * bi : bi;
      }
      pp[i] -= lr * d;
    }
  });
  (void)name;
}

}  // namespace booster::optim
