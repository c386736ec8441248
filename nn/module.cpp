// The module registry: walking, replacing, state dicts and cloning.
#include "nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/tensor/lazy.h"

namespace booster::nn {

namespace {
thread_local bool t_skip_init = false;

std::pair<std::string, std::string> split_first(const std::string& path) {
  const auto dot = path.find('.');
  if (dot == std::string::npos) return {path, ""};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

std::pair<std::string, std::string> split_last(const std::string& path) {
  const auto dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

std::string join(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}

// A shared_ptr to m: the owning one when m is owned by a shared_ptr, else a non-owning
// alias (modules on the stack, or inside their own constructor).
std::shared_ptr<Module> self_ptr(const Module& m) {
  auto p = std::const_pointer_cast<Module>(m.weak_from_this().lock());
  return p ? p : std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(&m));
}
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }
bool SkipInitGuard::active() { return t_skip_init; }

std::string demangle(const char* mangled) {
  int status = 0;
  char* s = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && s ? s : mangled;
  std::free(s);
  const auto colon = out.rfind("::");
  return colon == std::string::npos ? out : out.substr(colon + 2);
}

detail::ChildCell* Module::add_child(const std::string& name, std::shared_ptr<Module> m,
                                     std::function<bool(const Module&)> accepts, std::string kind) {
  BOOSTER_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": invalid child name '", name, "'");
  BOOSTER_CHECK(!find_child(name), type_name(), ": child '", name, "' registered twice");
  if (m) name_lazy_tensors(*m, name + ".");
  children_.push_back(std::make_unique<detail::ChildCell>(detail::ChildCell{name, std::move(m), std::move(accepts), std::move(kind)}));
  return children_.back().get();
}

void name_lazy_tensors(const Module& m, const std::string& prefix) {
  for (auto& [n, t] : m.state_dict())  // parameters and buffers
    if (LazyRecipe* r = lazy_recipe(t)) r->name = prefix + n;
}

TensorSlot Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  BOOSTER_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": invalid parameter name '", name, "'");
  bool is_param = false;
  BOOSTER_CHECK(!find_tensor(name, &is_param), type_name(), ": tensor '", name, "' registered twice");
  if (t.defined() && requires_grad) t.requires_grad_(true);
  if (LazyRecipe* r = lazy_recipe(t)) r->name = name;
  params_.push_back(std::make_unique<detail::TensorCell>(detail::TensorCell{name, t}));
  return TensorSlot(params_.back().get());
}

TensorSlot Module::register_buffer(const std::string& name, Tensor t) {
  bool is_param = false;
  BOOSTER_CHECK(!find_tensor(name, &is_param), type_name(), ": tensor '", name, "' registered twice");
  if (LazyRecipe* r = lazy_recipe(t)) r->name = name;
  buffers_.push_back(std::make_unique<detail::TensorCell>(detail::TensorCell{name, t}));
  return TensorSlot(buffers_.back().get());
}

detail::ChildCell* Module::find_child(const std::string& name) const {
  for (auto& c : children_)
    if (c->name == name) return c.get();
  return nullptr;
}

detail::TensorCell* Module::find_tensor(const std::string& name, bool* is_param) const {
  for (auto& c : params_)
    if (c->name == name) return *is_param = true, c.get();
  for (auto& c : buffers_)
    if (c->name == name) return *is_param = false, c.get();
  return nullptr;
}

void Module::walk_tensors(const std::string& prefix, bool params, bool recurse, StateDict& out) const {
  for (auto& c : params ? params_ : buffers_)
    if (c->tensor.defined()) out.emplace_back(join(prefix, c->name), c->tensor);
  if (!recurse) return;
  for (auto& c : children_)
    if (c->module) c->module->walk_tensors(join(prefix, c->name), params, true, out);
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  walk_tensors("", true, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  walk_tensors("", false, recurse, out);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (auto& c : children_)
    if (c->module) out.emplace_back(c->name, c->module);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.emplace_back("", self_ptr(*this));
  for (auto& c : children_) {
    if (!c->module) continue;
    for (auto& [n, m] : c->module->named_modules()) out.emplace_back(join(c->name, n), m);
  }
  return out;
}

std::shared_ptr<Module> Module::get(const std::string& path) const {
  if (path.empty()) return self_ptr(*this);
  auto [head, rest] = split_first(path);
  detail::ChildCell* c = find_child(head);
  if (!c || !c->module) {
    std::string names;
    for (auto& ch : children_) names += (names.empty() ? "" : ", ") + ch->name;
    BOOSTER_THROW(ValueError, "get('", path, "'): ", type_name(), " has no child '", head, "' (children: ", names, ")");
  }
  return c->module->get(rest);
}

Tensor Module::get_tensor(const std::string& path) const {
  auto [owner, name] = split_last(path);
  auto m = get(owner);
  bool is_param = false;
  detail::TensorCell* c = m->find_tensor(name, &is_param);
  BOOSTER_CHECK(c, "get_tensor('", path, "'): ", m->type_name(), " has no parameter or buffer '", name, "'");
  return c->tensor;
}

void Module::replace(const std::string& path, std::shared_ptr<Module> module) {
  BOOSTER_CHECK(module != nullptr, "replace('", path, "'): the new module is null");
  auto [owner, name] = split_last(path);
  auto parent = get(owner);
  detail::ChildCell* c = parent->find_child(name);
  BOOSTER_CHECK(c, "replace('", path, "'): ", parent->type_name(), " has no child '", name, "'");
  BOOSTER_CHECK(c->accepts(*module), "replace('", path, "'): the slot holds a ", c->kind, " (now a ",
                c->module ? c->module->type_name() : "null", "), and a ", module->type_name(), " is not a ", c->kind);
  module->train(parent->is_training());
  name_lazy_tensors(*module, path + ".");
  c->module = std::move(module);
}

void Module::replace_tensor(const std::string& path, const Tensor& t) {
  auto [owner, name] = split_last(path);
  auto m = get(owner);
  bool is_param = false;
  detail::TensorCell* c = m->find_tensor(name, &is_param);
  BOOSTER_CHECK(c, "replace_tensor('", path, "'): ", m->type_name(), " has no parameter or buffer '", name, "'");
  c->tensor = t;
}

HookHandle Module::add_hook(HookList<ModuleHook> Hooks::*list, ModuleHook hook) {
  BOOSTER_CHECK(hook != nullptr, type_name(), ": hook is empty");
  if (!hooks_) hooks_ = std::make_shared<Hooks>();
  const uint64_t id = ((*hooks_).*list).add(std::move(hook));
  std::weak_ptr<Hooks> weak = hooks_;
  return HookHandle([weak, list, id] {
    if (auto h = weak.lock()) ((*h).*list).remove(id);
  });
}

HookHandle Module::register_forward_pre_hook(ModuleHook hook) { return add_hook(&Hooks::forward_pre, std::move(hook)); }
HookHandle Module::register_forward_hook(ModuleHook hook) { return add_hook(&Hooks::forward, std::move(hook)); }
HookHandle Module::register_backward_pre_hook(ModuleHook hook) { return add_hook(&Hooks::backward_pre, std::move(hook)); }

namespace {
const char* attribute_type(const Attribute& a) {
  static const char* names[] = {"int", "float", "bool", "string"};
  return names[a.index()];
}
}  // namespace

std::vector<std::string> Module::attribute_names() const {
  std::vector<std::string> out;
  for (auto& [n, p] : attributes_) out.push_back(n);
  return out;
}

void Module::set_attribute(const std::string& path, const Attribute& value) {
  auto [owner, name] = split_last(path);
  auto m = get(owner);
  for (auto& [n, p] : m->attributes_) {
    if (n != name) continue;
    BOOSTER_CHECK(p.index() == value.index(), "set_attribute('", path, "'): ", m->type_name(), ".", name, " is ",
                  attribute_type(Attribute(std::visit([](auto* v) { return Attribute(*v); }, p))), ", got ",
                  attribute_type(value));
    std::visit([&](auto* dst) { *dst = std::get<std::remove_pointer_t<decltype(dst)>>(value); }, p);
    return;
  }
  std::string names;
  for (auto& a : m->attribute_names()) names += (names.empty() ? "" : ", ") + a;
  BOOSTER_THROW(ValueError, "set_attribute('", path, "'): ", m->type_name(), " has no attribute '", name,
                "' (attributes: ", names.empty() ? "none" : names, ")");
}

Attribute Module::attribute(const std::string& path) const {
  auto [owner, name] = split_last(path);
  auto m = get(owner);
  for (auto& [n, p] : m->attributes_)
    if (n == name) return std::visit([](auto* v) { return Attribute(*v); }, p);
  BOOSTER_THROW(ValueError, "attribute('", path, "'): ", m->type_name(), " has no attribute '", name, "'");
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_)
    if (c->module) c->module->train(on);
}

StateDict Module::state_dict() const {
  StateDict out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

LoadResult Module::load_state_dict(const StateDict& sd, bool strict) {
  LoadResult r;
  StateDict mine = state_dict();
  std::map<std::string, Tensor> given(sd.begin(), sd.end());
  std::map<std::string, bool> seen;
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      r.missing_keys.push_back(name);
      continue;
    }
    seen[name] = true;
    if (it->second.shape() != t.shape())
      r.mismatched.push_back(name + ": checkpoint " + shape_str(it->second.shape()) + " vs model " + shape_str(t.shape()));
  }
  for (auto& [name, t] : sd)
    if (!seen.count(name)) r.unexpected_keys.push_back(name);
  if (strict && !r.ok()) {
    std::ostringstream os;
    os << "load_state_dict into " << type_name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << "\n  " << what << " (" << v.size() << "):";
      for (auto& s : v) os << "\n    " << s;
    };
    list("missing keys", r.missing_keys);
    list("unexpected keys", r.unexpected_keys);
    list("size mismatches", r.mismatched);
    BOOSTER_THROW(ValueError, os.str());
  }
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end() || it->second.shape() != t.shape()) continue;
    assign_or_adopt(t, it->second);  // a lazy model keeps it as the source: boost copies in what each rank keeps
  }
  return r;
}

void Module::copy_into(Module& dst) const {
  NoGradGuard ng;
  dst.training_ = training_;
  for (auto& [n, p] : attributes_) dst.set_attribute(n, std::visit([](auto* v) { return Attribute(*v); }, p));
  for (auto& c : children_) {
    detail::ChildCell* d = dst.find_child(c->name);
    BOOSTER_CHECK(d, "clone: ", dst.type_name(), " built without child '", c->name, "'");
    d->module = c->module ? c->module->clone() : nullptr;
  }
  for (bool params : {true, false}) {
    for (auto& c : params ? params_ : buffers_) {
      bool is_param = false;
      detail::TensorCell* d = dst.find_tensor(c->name, &is_param);
      BOOSTER_CHECK(d, "clone: ", dst.type_name(), " built without tensor '", c->name, "'");
      if (!c->tensor.defined()) {
        d->tensor = Tensor();
        continue;
      }
      Tensor copy = is_lazy(c->tensor) ? lazy_clone(c->tensor) : c->tensor.detach().clone();
      if (c->tensor.region()) copy.set_region(*c->tensor.region());  // a shard stays the same slice
      if (c->tensor.requires_grad()) copy.requires_grad_(true);
      d->tensor = copy;
    }
  }
}

std::shared_ptr<Module> Module::clone() const {
  std::shared_ptr<Module> m;
  {
    SkipInitGuard skip;
    m = fresh();
  }
  copy_into(*m);
  return m;
}

void Module::requires_grad_(bool on) {
  for (auto& [n, p] : named_parameters()) {
    Tensor t = p;
    t.requires_grad_(on);
  }
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& [n, p] : named_parameters()) {
    Tensor t = p;
    if (set_to_none || !t.grad().defined()) t.set_grad(Tensor());
    else t.grad().zero_();
  }
}

}  // namespace booster::nn
