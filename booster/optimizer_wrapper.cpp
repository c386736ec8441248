// OptimizerWrapper (see optimizer_wrapper.h).
#include "booster/optimizer_wrapper.h"

#include "core/autograd/engine.h"

namespace booster {

OptimizerWrapper::OptimizerWrapper(std::shared_ptr<optim::Optimizer> optim) : optim_(std::move(optim)) {
  BOOSTER_CHECK(optim_ != nullptr, "OptimizerWrapper: the optimizer is null");
}

OptimizerWrapper::OptimizerWrapper(std::shared_ptr<OptimizerWrapper> inner) : inner_(std::move(inner)) {
  BOOSTER_CHECK(inner_ != nullptr, "OptimizerWrapper: the wrapped optimizer is null");
}

void OptimizerWrapper::backward(const Tensor& loss, bool retain_graph) {
  if (inner_) return inner_->backward(loss, retain_graph);
  loss.backward(Tensor(), retain_graph);
}

void OptimizerWrapper::backward_by_grad(const Tensor& tensor, const Tensor& grad, bool retain_graph) {
  if (inner_) return inner_->backward_by_grad(tensor, grad, retain_graph);
  tensor.backward(grad, retain_graph);
}

void OptimizerWrapper::step() {
  if (inner_) return inner_->step();
  optim_->step();
}

void OptimizerWrapper::zero_grad(bool set_to_none) {
  if (inner_) return inner_->zero_grad(set_to_none);
  optim_->zero_grad(set_to_none);
}

double OptimizerWrapper::clip_norm(double max_norm, double norm_type, bool error_if_nonfinite,
                                   const optim::NormScope& scope) {
  if (inner_) return inner_->clip_norm(max_norm, norm_type, error_if_nonfinite, scope);
  return leaf_clip(max_norm, norm_type, error_if_nonfinite, scope);
}

double OptimizerWrapper::leaf_clip(double max_norm, double norm_type, bool error_if_nonfinite,
                                   const optim::NormScope& scope) {
  grad_norm_ = optim::clip_grad_norm(parameters(), max_norm, norm_type, error_if_nonfinite, scope);
  return *grad_norm_;
}

void OptimizerWrapper::clip_grad_by_value(double clip_value) {
  if (inner_) return inner_->clip_grad_by_value(clip_value);
  optim::clip_grad_value(parameters(), clip_value);
}

std::optional<double> OptimizerWrapper::get_grad_norm() const { return inner_ ? inner_->get_grad_norm() : grad_norm_; }

optim::OptimizerStateDict OptimizerWrapper::state_dict() const {
  return inner_ ? inner_->state_dict() : optim_->state_dict();
}

void OptimizerWrapper::load_state_dict(const optim::OptimizerStateDict& sd) {
  if (inner_) return inner_->load_state_dict(sd);
  optim_->load_state_dict(sd);
}

std::shared_ptr<optim::Optimizer> OptimizerWrapper::unwrap() const { return inner_ ? inner_->unwrap() : optim_; }

void OptimizerWrapper::replace_leaf(std::shared_ptr<OptimizerWrapper> leaf) {
  BOOSTER_CHECK(leaf != nullptr && leaf->inner_ == nullptr, "replace_leaf: the new leaf must not wrap another");
  BOOSTER_CHECK(inner_ != nullptr, type_name(), ".replace_leaf: a leaf cannot replace itself; wrap it instead");
  OptimizerWrapper* w = this;
  while (w->inner_->inner_) w = w->inner_.get();
  w->inner_ = std::move(leaf);
}

void OptimizerWrapper::synchronize() {
  if (inner_) inner_->synchronize();
}

std::vector<Tensor> OptimizerWrapper::parameters() const {
  std::vector<Tensor> out;
  for (auto& g : unwrap()->param_groups())
    for (auto& [n, p] : g.params) out.push_back(p);
  return out;
}

std::vector<StateLayout> OptimizerWrapper::state_layout() const {
  if (inner_) return inner_->state_layout();
  std::vector<StateLayout> out;
  for (auto& g : optim_->param_groups())
    for (auto& [n, p] : g.params) out.push_back({n, p.shape(), p.region() ? *p.region() : Region::whole(p.shape())});
  return out;
}

optim::OptimizerStateDict OptimizerWrapper::local_state_dict() const {
  return inner_ ? inner_->local_state_dict() : optim_->state_dict();
}

OptimizerWrapper::CheckpointShare OptimizerWrapper::local_checkpoint_state() const {
  return inner_ ? inner_->local_checkpoint_state() : CheckpointShare{local_state_dict(), {}};
}

ShardedState OptimizerWrapper::local_load_targets(const std::map<std::string, std::vector<std::string>>& keys) {
  return inner_ ? inner_->local_load_targets(keys) : ShardedState{};
}

void OptimizerWrapper::load_local_state_dict(const optim::OptimizerStateDict& sd) {
  if (inner_) return inner_->load_local_state_dict(sd);
  optim_->load_state_dict(sd);
}

}  // namespace booster
