// ModelWrapper (see model_wrapper.h).
#include "booster/model_wrapper.h"

namespace booster {

ModelWrapper::ModelWrapper(std::shared_ptr<nn::Module> module) : module_(std::move(module)) {
  BOOSTER_CHECK(module_ != nullptr, "ModelWrapper: the module is null");
}

ModelWrapper::ModelWrapper(std::shared_ptr<ModelWrapper> inner) : inner_(std::move(inner)) {
  BOOSTER_CHECK(inner_ != nullptr, "ModelWrapper: the wrapped model is null");
  module_ = inner_->module();
}

void ModelWrapper::before_forward() {
  if (inner_) inner_->before_forward();
}

void ModelWrapper::check_whole_forward() const {
  if (inner_) inner_->check_whole_forward();
}

DType ModelWrapper::input_dtype() const { return inner_ ? inner_->input_dtype() : DType::f32; }

Tensor ModelWrapper::cast_input(const Tensor& t) const {
  const DType to = input_dtype();
  return t.defined() && is_floating(t.dtype()) && to != DType::f32 ? t.to(to) : t;
}

TensorMap ModelWrapper::stage_forward(const TensorMap& inputs, const nn::StageSpec& stage) {
  auto* pm = dynamic_cast<nn::PipelineModule*>(module_.get());
  BOOSTER_CHECK(pm != nullptr, type_name(), ".stage_forward: ", module_->type_name(),
                " cannot run as pipeline stages (it does not implement nn::PipelineModule)");
  before_forward();
  TensorMap cast;
  for (auto& [k, t] : inputs) cast[k] = cast_input(t);
  return module_->call_forward([&] { return pm->stage_forward(cast, stage); });
}

ShardedState ModelWrapper::checkpoint_state() { return inner_ ? inner_->checkpoint_state() : module_state(*module_); }

void ModelWrapper::after_load() {
  if (inner_) inner_->after_load();
}

ShardedState module_state(const nn::Module& m) {
  ShardedState out;
  for (auto& [name, t] : m.state_dict())
    out.push_back({name, t, t.region() ? *t.region() : Region::whole(t.shape())});
  return out;
}

}  // namespace booster
