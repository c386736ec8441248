// Optimizer base: group bookkeeping, the step loop with fp32 staging, state dicts.
#include "optim/optimizer.h"

#include "core/common/profiler.h"

#include <set>

#include "core/autograd/grad_mode.h"

namespace booster::optim {

double ParamGroup::get(const std::string& key) const {
  auto it = options.find(key);
  BOOSTER_CHECK(it != options.end(), "parameter group has no option '", key, "'");
  return it->second;
}

Optimizer::Optimizer(std::string type, std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : type_(std::move(type)), defaults_(std::move(defaults)) {
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::fill_defaults(ParamGroup& g) const {
  for (auto& [k, v] : g.options) {
    if (!defaults_.count(k)) {
      std::string known;
      for (auto& [dk, dv] : defaults_) known += (known.empty() ? "" : ", ") + dk;
      BOOSTER_THROW(ValueError, type_name(), ": unknown option '", k, "' in a parameter group (known: ", known, ")");
    }
  }
  for (auto& [k, v] : defaults_) g.options.emplace(k, v);
  for (const char* k : {"lr", "eps", "weight_decay", "momentum", "dampening"}) {
    auto it = g.options.find(k);
    BOOSTER_CHECK(it == g.options.end() || it->second >= 0, type_name(), ": ", k, " must be >= 0, got ", it->second,
                  " (parameter group ", groups_.size(), ")");
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  fill_defaults(group);
  std::set<std::string> seen;
  for (auto& g : groups_)
    for (auto& [n, p] : g.params) seen.insert(n);
  for (auto& [n, p] : group.params) {
    BOOSTER_CHECK(p.defined(), type_name(), ": parameter '", n, "' is undefined");
    BOOSTER_CHECK(is_floating(p.dtype()), type_name(), ": parameter '", n, "' is ", dtype_name(p.dtype()),
                  ", optimizers update floating tensors only");
    BOOSTER_CHECK(seen.insert(n).second, type_name(), ": parameter '", n, "' appears in more than one group");
  }
  groups_.push_back(std::move(group));
}

Tensor Optimizer::checked_grad(const std::string& name, const Tensor& p, const Tensor& grad, const Tensor& working,
                               bool* fused) const {
  BOOSTER_CHECK_T(ShapeError, grad.shape() == p.shape(), type_name(), ": gradient of '", name, "' has shape ",
                  shape_str(grad.shape()), ", the value updated ", shape_str(p.shape()));
  BOOSTER_CHECK_T(DTypeError, p.dtype() == DType::f32 && p.is_contiguous(), type_name(), ": the value of '", name,
                  "' updated must be contiguous f32, got ", p.describe());
  BOOSTER_CHECK_T(ShapeError, !working.defined() || working.numel() == p.numel(), type_name(), ": the compute copy of '",
                  name, "' has ", working.numel(), " elements, the value ", p.numel());
  *fused = fuses_io() && grad.is_contiguous() && is_floating(grad.dtype()) && (!working.defined() || working.is_contiguous());
  return *fused || (grad.dtype() == DType::f32 && grad.is_contiguous()) ? grad : grad.to(DType::f32).contiguous();
}

std::vector<double> Optimizer::layer_sums(const std::string&, Tensor&, const Tensor&, ParamState&, const ParamGroup&) {
  BOOSTER_THROW(ValueError, type_name(), " is not a layer-wise optimizer");
}

void Optimizer::layer_apply(const std::string&, Tensor&, const Tensor&, ParamState&, const ParamGroup&,
                            const std::vector<double>&) {
  BOOSTER_THROW(ValueError, type_name(), " is not a layer-wise optimizer");
}

void Optimizer::step_on_shards(const std::vector<UpdateTarget>& targets, double grad_divisor,
                               const std::vector<std::string>& names, const AllShardSums& complete) {
  if (!layerwise()) return step_on(targets, grad_divisor);
  ProfileScope prof_("optimizer step");
  NoGradGuard ng;
  grad_divisor_ = grad_divisor;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  std::vector<std::vector<double>> sums(names.size(), std::vector<double>(2, 0.0));
  std::vector<Tensor> grads;
  try {
    for (auto& t : targets) {  // the moments, and this rank's partial sums
      auto it = index.find(t.name);
      BOOSTER_CHECK(it != index.end(), type_name(), ": '", t.name, "' is not among the step's parameters");
      bool fused = false;
      grads.push_back(checked_grad(t.name, t.value, t.grad, t.working, &fused));
      ParamState& st = state_[t.name];
      ++st.step;
      Tensor p = t.value;
      const auto s = layer_sums(t.name, p, grads.back(), st, group_of(t.name));
      for (size_t k = 0; k < s.size() && k < 2; ++k) sums[it->second][k] += s[k];
    }
    complete(sums);
    for (size_t i = 0; i < names.size(); ++i) complete_sums(names[i], sums[i]);  // tensor-parallel blocks
    for (size_t k = 0; k < targets.size(); ++k) {
      const UpdateTarget& t = targets[k];
      Tensor p = t.value;
      layer_apply(t.name, p, grads[k], state_[t.name], group_of(t.name), sums[index.at(t.name)]);
      if (t.working.defined()) {
        Tensor w = t.working;
        w.view({-1}).copy_(p.view({-1}));
      }
    }
  } catch (...) {
    grad_divisor_ = 1.0;
    throw;
  }
  grad_divisor_ = 1.0;
}

void Optimizer::update_one(const std::string& name, Tensor& p, const Tensor& grad, const ParamGroup& group,
                           const Tensor& working) {
  bool fused = false;
  Tensor g = checked_grad(name, p, grad, working, &fused);
  ParamState& st = state_[name];
  ++st.step;
  update(name, p, g, st, group, fused ? working : Tensor());
  if (working.defined() && !fused) {
    Tensor w = working;
    w.view({-1}).copy_(p.view({-1}));
  }
}

void Optimizer::step() {
  ProfileScope prof_("optimizer step");
  NoGradGuard ng;
  for (auto& group : groups_) {
    for (auto& [name, param] : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      const bool staged = param.dtype() != DType::f32;
      Tensor p = staged ? param.to(DType::f32) : param;
      update_one(name, p, grad, group);
      if (staged) param.copy_(p);
    }
  }
}

void Optimizer::step_on(const std::vector<UpdateTarget>& targets, double grad_divisor) {
  ProfileScope prof_("optimizer step");
  NoGradGuard ng;
  grad_divisor_ = grad_divisor;
  try {
    for (auto& t : targets) {
      Tensor p = t.value;
      update_one(t.name, p, t.grad, group_of(t.name), t.working);
    }
  } catch (...) {
    grad_divisor_ = 1.0;
    throw;
  }
  grad_divisor_ = 1.0;
}

const ParamGroup& Optimizer::group_of(const std::string& name) const {
  for (auto& g : groups_)
    for (auto& [n, p] : g.params)
      if (n == name) return g;
  BOOSTER_THROW(ValueError, type_name(), ": no parameter group holds '", name, "'");
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& group : groups_)
    for (auto& [name, p] : group.params) {
      Tensor t = p;
      if (set_to_none || !t.grad().defined()) t.set_grad(Tensor());
      else t.grad().zero_();
    }
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  sd.type = type_name();
  for (auto& g : groups_) {
    OptimizerStateDict::Group gs{g.options, {}};
    for (auto& [n, p] : g.params) gs.param_names.push_back(n);
    sd.param_groups.push_back(std::move(gs));
  }
  for (auto& [name, st] : state_) {
    ParamState copy{st.step, {}};
    for (auto& [k, t] : st.buffers) copy.buffers[k] = t.detach().clone();
    sd.state[name] = std::move(copy);
  }
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd, const std::map<std::string, Shape>& state_shapes) {
  BOOSTER_CHECK(sd.type.empty() || sd.type == type_name(), "load_state_dict: state of a ", sd.type, " given to a ",
                type_name());
  BOOSTER_CHECK(sd.param_groups.size() == groups_.size(), "load_state_dict: ", sd.param_groups.size(),
                " parameter groups saved, ", groups_.size(), " in this ", type_name());
  std::map<std::string, const Tensor*> by_name;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& saved = sd.param_groups[i].param_names;
    std::vector<std::string> mine;
    for (auto& [n, p] : groups_[i].params) mine.push_back(n), by_name[n] = &p;
    BOOSTER_CHECK(std::set<std::string>(saved.begin(), saved.end()) == std::set<std::string>(mine.begin(), mine.end()),
                  "load_state_dict: parameter group ", i, " holds different parameters than the saved one (",
                  saved.size(), " saved, ", mine.size(), " here)");
  }
  std::map<std::string, ParamState> next;
  for (auto& [name, st] : sd.state) {
    auto it = by_name.find(name);
    BOOSTER_CHECK(it != by_name.end(), "load_state_dict: state for unknown parameter '", name, "'");
    ParamState copy{st.step, {}};
    auto shape = state_shapes.find(name);
    const Shape& want = shape != state_shapes.end() ? shape->second : it->second->shape();
    for (auto& [k, t] : st.buffers) {
      BOOSTER_CHECK_T(ShapeError, t.numel() == shape_numel(want), "load_state_dict: state '", k, "' of '", name,
                      "' has shape ", shape_str(t.shape()), ", here it takes ", shape_str(want));
      copy.buffers[k] = t.detach().to(DType::f32).contiguous().clone().view(want);
    }
    next[name] = std::move(copy);
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    for (auto& [k, v] : sd.param_groups[i].options) groups_[i].options[k] = v;
  }
  state_ = std::move(next);
}

bool excluded_from_decay(const std::string& name, const Tensor& p, const std::vector<std::string>& skip) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  bool out = p.dim() <= 1 || ends_with(".bias");
  for (auto& s : skip) out |= ends_with(s);
  return out;
}

std::vector<ParamGroup> param_groups_no_decay(const NamedParams& params, double weight_decay,
                                              const std::vector<std::string>& skip,
                                              const std::map<std::string, double>& no_decay_options) {
  ParamGroup decay, no_decay;
  decay.options["weight_decay"] = weight_decay;
  no_decay.options = no_decay_options;
  no_decay.options["weight_decay"] = 0.0;
  for (auto& [n, p] : params) (excluded_from_decay(n, p, skip) ? no_decay : decay).params.emplace_back(n, p);
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(std::move(decay));
  if (!no_decay.params.empty()) out.push_back(std::move(no_decay));
  return out;
}

}  // namespace booster::optim
