// OptimizerLeaf and OptimizerDecorator (see optimizer_wrapper.h).
#include "booster/optimizer_wrapper.h"

#include "core/autograd/engine.h"

namespace booster {

std::vector<Tensor> OptimizerWrapper::parameters() const {
  std::vector<Tensor> out;
  for (auto& g : unwrap()->param_groups())
    for (auto& [n, p] : g.params) out.push_back(p);
  return out;
}

OptimizerLeaf::OptimizerLeaf(std::shared_ptr<optim::Optimizer> optim) : optim_(std::move(optim)) {
  BOOSTER_CHECK(optim_ != nullptr, "OptimizerWrapper: the optimizer is null");
}

void OptimizerLeaf::backward(const Tensor& loss, bool retain_graph) { loss.backward(Tensor(), retain_graph); }

void OptimizerLeaf::backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph) {
  tensor.backward(grad, retain_graph);
}

void OptimizerLeaf::step() { optim_->step(); }

void OptimizerLeaf::zero_grad(bool set_to_none) { optim_->zero_grad(set_to_none); }

double OptimizerLeaf::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                const optim::NormScope& scope) {
  grad_norm_ = optim::clip_grad_norm(parameters(), max_norm, norm_type, error_if_nonfinite, scope);
  return *grad_norm_;
}

void OptimizerLeaf::clip_grad_by_value(double clip_value) { optim::clip_grad_value(parameters(), clip_value); }

optim::OptimizerStateDict OptimizerLeaf::state_dict() const { return optim_->state_dict(); }

void OptimizerLeaf::load_state_dict(const optim::OptimizerStateDict& sd) { optim_->load_state_dict(sd); }

std::vector<StateLayout> OptimizerLeaf::state_layout() const {
  std::vector<StateLayout> out;
  for (auto& g : optim_->param_groups())
    for (auto& [n, p] : g.params) out.push_back({n, p.shape(), p.region() ? *p.region() : Region::whole(p.shape())});
  return out;
}

optim::OptimizerStateDict OptimizerLeaf::local_state_dict() const { return optim_->state_dict(); }

OptimizerWrapper::CheckpointShare OptimizerLeaf::local_checkpoint_state() const {
  return CheckpointShare{local_state_dict(), {}};
}

ShardedState OptimizerLeaf::local_load_targets(const std::map<std::string, std::vector<std::string>>&) { return {}; }

void OptimizerLeaf::load_local_state_dict(const optim::OptimizerStateDict& sd) { optim_->load_state_dict(sd); }

OptimizerDecorator::OptimizerDecorator(std::shared_ptr<OptimizerWrapper> inner) : inner_(std::move(inner)) {
  BOOSTER_CHECK(inner_ != nullptr, "OptimizerWrapper: the wrapped optimizer is null");
}

void OptimizerDecorator::replace_leaf(std::shared_ptr<OptimizerLeaf> leaf) {
  BOOSTER_CHECK(leaf != nullptr, "replace_leaf: the new leaf is null");
  OptimizerDecorator* d = this;
  while (auto* next = dynamic_cast<OptimizerDecorator*>(d->inner_.get())) d = next;
  d->inner_ = std::move(leaf);
}

}  // namespace booster
