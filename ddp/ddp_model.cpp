// TorchDDPModel (see ddp_model.h).
#include "ddp/ddp_model.h"

#include "booster/plugin.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"

namespace booster::ddp {

TorchDDPModel::TorchDDPModel(std::shared_ptr<ModelWrapper> inner, const dist::ProcessGroup& group,
                             const ReducerOptions& reducer, bool broadcast_buffers)
    : ModelWrapper(std::move(inner)), group_(group), broadcast_buffers_(broadcast_buffers) {
  auto m = module();
  broadcast_module_state(*m, group_);
  reducer_ = std::make_shared<Reducer>(m->named_parameters(), group_, reducer);
}

void TorchDDPModel::before_forward() {
  ModelWrapper::before_forward();
  if (!broadcast_buffers_) return;
  NoGradGuard ng;
  for (auto& [n, t] : module()->named_buffers()) {
    Tensor x = t;
    dist::broadcast(x, group_.ranks()[0], group_);
  }
}

}  // namespace booster::ddp
