// MasterParams (see master_params.h).
#include "booster/master_params.h"

#include "core/autograd/grad_mode.h"
#include "core/common/profiler.h"
#include "core/tensor/lazy.h"

namespace booster {

MasterParams::MasterParams(const optim::NamedParams& params, DType working) : working_(working) {
  NoGradGuard ng;
  for (auto& [name, p] : params) {
    if (!is_floating(p.dtype())) continue;
    Tensor param = p;
    if (!param.requires_grad()) {  // frozen (a LoRA base): the working precision alone, no master
      if (is_lazy(param)) lazy_cast(param, working);
      else param.set_data(param.detach().to(working).contiguous());
      continue;
    }
    Tensor master;
    if (is_lazy(param)) {  // made in fp32 alone; the working copy materializes later
      master = region_values(param, param.region() ? *param.region() : Region::whole(param.shape()), DType::f32);
      lazy_cast(param, working);
    } else {
      master = param.detach().to(DType::f32).contiguous().clone();
      param.set_data(param.detach().to(working).contiguous());  // same handle, low-precision storage
    }
    if (param.region()) master.set_region(*param.region());
    entries_.push_back({name, param, master});
  }
}

Tensor MasterParams::master(const std::string& name) const {
  for (auto& e : entries_)
    if (e.name == name) return e.master;
  return Tensor();
}

void MasterParams::refresh_working() {
  ProfileScope prof_("refresh compute copies");
  NoGradGuard ng;
  for (auto& e : entries_) {
    Tensor t = e.param;
    t.copy_(e.master);
  }
}

ShardedState MasterParams::substitute(ShardedState state) const {
  for (auto& st : state)
    for (auto& e : entries_)
      if (e.name == st.name) {
        st.tensor = e.master;
        break;
      }
  return state;
}

}  // namespace booster
