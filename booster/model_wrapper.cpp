// ModelWrapper (see model_wrapper.h).
#include "booster/model_wrapper.h"

#include <omp.h>

#include "core/autograd/grad_mode.h"

namespace booster {

ModelWrapper::ModelWrapper(std::shared_ptr<nn::Module> module) : module_(std::move(module)) {
  BOOSTER_CHECK(module_ != nullptr, "ModelWrapper: the module is null");
}

ModelWrapper::ModelWrapper(std::shared_ptr<ModelWrapper> inner) : inner_(std::move(inner)) {
  BOOSTER_CHECK(inner_ != nullptr, "ModelWrapper: the wrapped model is null");
  module_ = inner_->module();
}

int ModelWrapper::split_shares(const std::vector<Tensor>& args) const {
  if (!split_batch_ || !autograd::GradMode::enabled() || omp_in_parallel() || omp_get_max_threads() < 2) return 1;
  int64_t rows = 0;
  for (const Tensor& a : args)
    if (a.defined()) rows = a.dim() >= 1 ? a.size(0) : 0;
  for (const auto& [name, m] : module_->named_modules())
    BOOSTER_CHECK(!m->has_hooks(), "split_batch: module '", name.empty() ? module_->type_name() : name,
                  "' has hooks, which would run once per batch share on the share's thread; boost without "
                  "split_batch, or remove the hooks");
  return nn::batch_shares(rows, omp_get_max_threads());
}

std::vector<Tensor> ModelWrapper::split_params() const {
  std::vector<Tensor> ps;
  for (auto& [name, p] : module_->named_parameters()) ps.push_back(p);
  return ps;
}

void ModelWrapper::before_forward() {
  if (inner_) inner_->before_forward();
}

void ModelWrapper::check_whole_forward() const {
  if (inner_) inner_->check_whole_forward();
}

GradSync* ModelWrapper::grad_sync() const { return inner_ ? inner_->grad_sync() : nullptr; }

DType ModelWrapper::input_dtype() const { return inner_ ? inner_->input_dtype() : DType::f32; }

Tensor ModelWrapper::cast_input(const Tensor& t) const {
  const DType to = input_dtype();
  return t.defined() && is_floating(t.dtype()) && to != DType::f32 ? t.to(to) : t;
}

TensorMap ModelWrapper::forward_named(const TensorMap& inputs) { return stage_forward(inputs, nn::whole_model(*module_)); }

TensorMap ModelWrapper::stage_forward(const TensorMap& inputs, const nn::StageSpec& stage) {
  auto* pm = dynamic_cast<nn::PipelineModule*>(module_.get());
  const bool whole = stage.first && stage.last && stage.layer_begin == 0 &&
                     stage.layer_end == (pm ? pm->num_pipeline_layers() : 0);
  BOOSTER_CHECK(pm != nullptr || whole, type_name(), ".stage_forward: ", module_->type_name(),
                " cannot run as pipeline stages (it does not implement nn::PipelineModule)");
  auto run = [&](const TensorMap& m) { return pm ? pm->stage_forward(m, stage) : nn::forward_named(*module_, m); };
  before_forward();
  std::vector<std::string> keys;
  std::vector<Tensor> args;
  for (auto& [k, t] : inputs) keys.push_back(k), args.push_back(cast_input(t));
  auto named = [&](const std::vector<Tensor>& a) {
    TensorMap m;
    for (size_t i = 0; i < keys.size(); ++i) m[keys[i]] = a[i];
    return m;
  };
  // Booster's split_batch: a whole-model stage runs its batch shares on their own threads.
  const int shares = whole ? split_shares(args) : 1;
  if (shares == 1) return module_->call_forward([&] { return run(named(args)); });
  return split_stage_forward(shares, keys, args, [&](const std::vector<Tensor>& a) { return run(named(a)); });
}

TensorMap ModelWrapper::split_stage_forward(int shares, const std::vector<std::string>& keys, const std::vector<Tensor>& args,
                                            const std::function<TensorMap(const std::vector<Tensor>&)>& forward) const {
  std::vector<std::string> out_keys;  // share 0's, read once every share has returned
  std::vector<Tensor> merged = nn::split_batch(shares, args, split_params(), [&](int s, const std::vector<Tensor>& a) {
    nn::ShareOutput out;
    for (auto& [k, t] : forward(a)) {
      if (s == 0) out_keys.push_back(k);
      out.tensors.push_back(t);
      // Rows of the batch are joined; a scalar (a mean over the rows) is weighted by them.
      out.merge.push_back(t.defined() && t.dim() == 0 ? nn::BatchMerge::mean : nn::BatchMerge::concat);
    }
    // A model's own loss (a mean over the labels that count, -100 left out) weighs each
    // share by those labels, so the merged mean is the batch's.
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == "labels" && a[i].defined() && is_index(a[i].dtype()) && a[i].dim() > 0) {
        out.weight = 0;
        for (int64_t l : a[i].to_int_vector()) out.weight += double(l >= 0);
      }
    return out;
  });
  TensorMap joined;
  for (size_t i = 0; i < out_keys.size(); ++i) joined[out_keys[i]] = merged[i];
  return joined;
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
