// OptimizerWrapper (see optimizer_wrapper.h).
#include "booster/optimizer_wrapper.h"

#include "core/autograd/engine.h"

namespace booster {

void OptimizerWrapper::backward(const Tensor& loss, bool retain_graph) {
  loss.backward(Tensor(), retain_graph);
  sync_grads();
}

void OptimizerWrapper::backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph) {
  tensor.backward(grad, retain_graph);
  sync_grads();
}

void OptimizerWrapper::step() {
  sync_grads();
  optim_->step();
}

void OptimizerWrapper::zero_grad(bool set_to_none) { optim_->zero_grad(set_to_none); }

double OptimizerWrapper::clip_grad_by_norm(double max_norm, double norm_type, bool error_if_nonfinite) {
  sync_grads();
  grad_norm_ = optim::clip_grad_norm(parameters(), max_norm, norm_type, error_if_nonfinite, norm_reducer());
  return *grad_norm_;
}

void OptimizerWrapper::clip_grad_by_value(double clip_value) {
  sync_grads();
  optim::clip_grad_value(parameters(), clip_value);
}

std::vector<Tensor> OptimizerWrapper::parameters() const {
  std::vector<Tensor> out;
  for (auto& g : optim_->param_groups())
    for (auto& [n, p] : g.params) out.push_back(p);
  return out;
}

}  // namespace booster
