// LoRA adapters (see lora.h): the layer, and wrapping a model's targets in it.
#include "nn/lora.h"

#include <cmath>
#include <regex>
#include <set>

#include "core/autograd/grad_mode.h"
#include "core/common/check.h"
#include "core/dist/functional.h"
#include "core/kernels/ops.h"
#include "nn/gpt2.h"
#include "nn/init.h"
#include "nn/parallel/linear_1d.h"
#include "nn/parallel/conv1d_1d.h"
#include "core/tensor/lazy.h"

#include <spdlog/spdlog.h>
#include <algorithm>

namespace booster::nn {

namespace {

// The dims of a region's frame that make up dim d of its full shape (a fused weight's out
// dim [3E] is the frame's [3, E]).
std::pair<size_t, size_t> frame_dims(const Region& r, size_t d) {
  const Shape& f = r.coords();
  size_t first = 0;
  for (size_t k = 0; k < d; ++k) {
    int64_t n = 1;
    while (n < r.full[k]) n *= f[first++];
  }
  size_t last = first;
  int64_t n = 1;
  while (n < r.full[d] || last == first) n *= f[last++];
  return {first, last};
}

// True when the region covers the frame dims [first, last) whole.
bool covers(const Region& r, std::pair<size_t, size_t> dims) {
  for (size_t k = dims.first; k < dims.second; ++k)
    if (r.offset[k] != 0 || r.extent[k] != r.coords()[k]) return false;
  return true;
}

// A region of an adapter matrix [a0, a1] whose dim `split` (0 or 1) is cut as `dims` of the
// base's region `base` are, the other dim whole.
Region adapter_region(const Region& base, std::pair<size_t, size_t> dims, const Shape& full, size_t split) {
  Shape frame, offset, extent;
  auto whole = [&](int64_t n) { frame.push_back(n), offset.push_back(0), extent.push_back(n); };
  if (split == 1) whole(full[0]);
  for (size_t k = dims.first; k < dims.second; ++k)
    frame.push_back(base.coords()[k]), offset.push_back(base.offset[k]), extent.push_back(base.extent[k]);
  if (split == 0) whole(full[1]);
  return frame.size() == 2 ? Region::box(full, offset, extent) : Region::framed_box(full, frame, offset, extent);
}

// The logical [out, in] of a base layer's weight ([in, out] with fan_in_fan_out).
std::pair<int64_t, int64_t> base_features(const UnaryModule& base, bool fan_in_fan_out) {
  const Tensor w = base.get_tensor("weight");
  BOOSTER_CHECK_T(ShapeError, w.defined() && w.dim() == 2, "LoraLinear: the base ", base.type_name(),
                  " has no 2-D weight");
  const Shape full = w.region() ? w.region()->full : w.shape();
  return fan_in_fan_out ? std::pair{full[1], full[0]} : std::pair{full[0], full[1]};
}

}  // namespace

LoraLinear::LoraLinear(std::shared_ptr<UnaryModule> base, int64_t r, double lora_alpha, double dropout_p,
                       bool use_rslora, bool fan_in_fan_out, const std::string& init_lora_weights)
    : r_(r), alpha_(lora_alpha), dropout_(dropout_p), rslora_(use_rslora), fan_in_fan_out_(fan_in_fan_out),
      init_(init_lora_weights) {
  BOOSTER_CHECK(base != nullptr, "LoraLinear: the base layer is null");
  BOOSTER_CHECK(r > 0, "LoraLinear: r must be a positive integer, got ", r);
  std::tie(out_, in_) = base_features(*base, fan_in_fan_out);
  scaling_ = use_rslora ? lora_alpha / std::sqrt(double(r)) : lora_alpha / double(r);
  const DType dt = base->get_tensor("weight").dtype();
  auto a = std::make_shared<Linear>(in_, r, false, is_floating(dt) ? dt : DType::f32);
  auto b = std::make_shared<Linear>(r, out_, false, is_floating(dt) ? dt : DType::f32);
  if (!SkipInitGuard::active()) {
    NoGradGuard ng;
    Tensor wa = a->weight.get(), wb = b->weight.get();
    if (init_lora_weights == "gaussian") init::normal_(wa, 0.0, 1.0 / double(r));
    if (init_lora_weights != "false") init::zeros_(wb);  // "false": B random too (PEFT's testing mode)
  }
  base_layer = register_module<UnaryModule>("base_layer", std::move(base));
  lora_dropout = register_module<UnaryModule>(
      "lora_dropout", dropout_p > 0 ? std::shared_ptr<UnaryModule>(std::make_shared<Dropout>(dropout_p))
                                       : std::make_shared<Identity>());
  lora_A = register_module<Linear>("lora_A", a);
  lora_B = register_module<Linear>("lora_B", b);
}

std::shared_ptr<Module> LoraLinear::fresh() const {
  SkipInitGuard skip;
  auto m = std::make_shared<LoraLinear>(std::static_pointer_cast<UnaryModule>(base_layer.shared()->clone()), r_, alpha_,
                                        dropout_, rslora_, fan_in_fan_out_, init_);
  m->split_ = split_;
  m->tp_ = tp_;
  m->gather_output_ = gather_output_;
  return m;
}

Tensor LoraLinear::forward(const Tensor& x) {
  Tensor y = base_layer(x);
  Tensor h = lora_A(lora_dropout(x));  // [..., r]: a partial sum over the tp group under a row split
  if (split_ == Split::row) h = dist::reduce_forward(h, *tp_);
  if (split_ == Split::column) h = dist::reduce_backward(h, *tp_);  // replicated: its gradient summed over the group
  Tensor delta = lora_B(h);
  if (gather_output_) delta = dist::gather_forward_split_backward(delta, delta.dim() - 1, *tp_);  // as the base's output
  return add(y, scale(delta, scaling_));
}

bool LoraLinear::shard_like_base(const dist::ProcessGroup* tp, const std::string& who) {
  const Tensor w = base_layer->get_tensor("weight");
  if (!w.region() || w.region()->is_whole()) return false;
  BOOSTER_CHECK(tp != nullptr, who, ": the base is sharded (", w.region()->str(), ") but no tensor-parallel group is given");
  BOOSTER_CHECK(split_ == Split::none, who, ": the adapter is already sharded");
  const Region& reg = *w.region();
  BOOSTER_CHECK(reg.is_box(), who, ": the base's weight is a flat range (", reg.str(), "), not a tensor-parallel block");
  const size_t out_dim = fan_in_fan_out_ ? 1 : 0, in_dim = 1 - out_dim;
  const auto out_dims = frame_dims(reg, out_dim), in_dims = frame_dims(reg, in_dim);
  const bool out_whole = covers(reg, out_dims), in_whole = covers(reg, in_dims);
  BOOSTER_CHECK(out_whole || in_whole, who, ": the base's weight is split along both dims (", reg.str(),
                "): LoRA adapts 1D tensor-parallel layers (column or row), not a 2D / 2.5D / 3D grid's");
  auto seq_split = [&]() {
    if (auto* l = dynamic_cast<const Linear1D*>(base_layer.get())) return l->options().seq_parallel;
    if (auto* c = dynamic_cast<const GPT2FusedLinearConv1DCol*>(base_layer.get())) return c->options().seq_parallel;
    if (auto* c = dynamic_cast<const GPT2FusedLinearConv1DRow*>(base_layer.get())) return c->options().seq_parallel;
    return false;
  };
  BOOSTER_CHECK(!seq_split(), who, ": LoRA beside a sequence-parallel (split_gather / ring) linear is not supported: "
                "its input or output is a token shard; use sequence_parallelism_mode all_to_all or ring_attn, or none");
  if (!out_whole) {  // column-parallel: this rank's output features, B's rows alike
    if (auto* l = dynamic_cast<const Linear1D*>(base_layer.get())) gather_output_ = l->options().gather_output;
    if (auto* c = dynamic_cast<const GPT2FusedLinearConv1DCol*>(base_layer.get())) gather_output_ = c->options().gather_output;
    BOOSTER_CHECK(!gather_output_ || out_dims.second - out_dims.first == 1, who,
                  ": a fused projection that gathers its output is not supported under LoRA");
    Tensor wb = lora_B->weight.get();
    shard_parameter_region(wb, adapter_region(reg, out_dims, {out_, r_}, 0), who + ".lora_B.weight");
    split_ = Split::column;
  } else {  // row-parallel: this rank's input features, A's columns alike
    if (auto* l = dynamic_cast<const Linear1DRow*>(base_layer.get()))
      BOOSTER_CHECK(l->options().parallel_input, who, ": LoRA on a row-parallel linear needs its input split (parallel_input)");
    Tensor wa = lora_A->weight.get();
    shard_parameter_region(wa, adapter_region(reg, in_dims, {r_, in_}, 1), who + ".lora_A.weight");
    split_ = Split::row;
  }
  tp_ = tp;
  return split_ == Split::row;
}

Tensor LoraLinear::merged_weight() const {
  NoGradGuard ng;
  const Tensor a = lora_A->weight.get(), b = lora_B->weight.get();
  BOOSTER_CHECK(!is_lazy(a) && !is_lazy(b), "merge_and_unload: the adapters are not materialized");
  Tensor delta = scale(matmul(b.to(DType::f32), a.to(DType::f32)), scaling_);  // [out, in] (this rank's part)
  if (fan_in_fan_out_) delta = delta.transpose(0, 1).contiguous();
  const Tensor w = base_layer->get_tensor("weight");
  BOOSTER_CHECK_T(ShapeError, delta.shape() == w.shape(), "merge_and_unload: the adapter's update ",
                  shape_str(delta.shape()), " does not match the base weight ", shape_str(w.shape()),
                  " (a layer sharded after its adapter was made?)");
  return add(w.to(DType::f32), delta).to(w.dtype());
}

namespace {

bool ends_with_name(const std::string& path, const std::string& name) {
  return path == name || (path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
                          path[path.size() - name.size() - 1] == '.');
}

bool matches_any(const std::string& path, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (ends_with_name(path, n)) return true;
  return false;
}

// A regex of a config (PEFT's Python regexes: the common syntax is ECMAScript's too).
std::regex make_regex(const std::string& pattern, const char* what) {
  try {
    return std::regex(pattern);
  } catch (const std::regex_error& e) {
    BOOSTER_THROW(ValueError, "LoraConfig: ", what, " '", pattern, "' is not a valid regular expression: ", e.what());
  }
}

bool is_linear(const Module& m) { return dynamic_cast<const Linear*>(&m) || dynamic_cast<const Conv1D*>(&m); }

// The layer index in a path ("vit.encoder.layer.3.attention..." -> 3) under one of the
// layer-list names, as PEFT finds it; -1 when there is none.
int64_t layer_index(const std::string& path, const std::vector<std::string>& patterns) {
  static const std::vector<std::string> common = {"layers", "h", "block", "blocks", "layer"};
  for (const std::string& p : patterns.empty() ? common : patterns) {
    std::smatch m;
    if (std::regex_match(path, m, make_regex("(.*\\.)?" + p + "\\.(\\d+)\\..*", "layers_pattern")))
      return std::stoll(m[2].str());
  }
  return -1;
}

// The value of the first pattern whose regex matches the end of the path (PEFT's
// rank_pattern / alpha_pattern), or `fallback`.
template <typename T>
T by_pattern(const std::map<std::string, T>& patterns, const std::string& path, T fallback) {
  for (auto& [key, v] : patterns)
    if (std::regex_match(path, make_regex("(.*\\.)?" + key, "a rank_pattern / alpha_pattern key"))) return v;
  return fallback;
}

std::vector<std::string> default_targets(const std::string& model_type) {
  if (model_type == "vit") return {"query", "value"};
  if (model_type == "gpt2") return {"c_attn"};
  if (model_type == "llama") return {"q_proj", "v_proj"};
  BOOSTER_THROW(ValueError, "LoraConfig: target_modules must be given for this model (PEFT's defaults are known for "
                            "vit, gpt2 and llama; the model is '", model_type, "')");
}

// Whether the module at `path` is one the config targets.
bool targeted(const LoraConfig& c, const std::string& path, const Module& m) {
  if (c.target_modules_regex) {
    if (!std::regex_match(path, make_regex(c.target_modules[0], "target_modules"))) return false;
  } else if (c.target_modules.size() == 1 && c.target_modules[0] == "all-linear") {
    if (!is_linear(m) || ends_with_name(path, "lm_head")) return false;  // PEFT leaves the output layer out
  } else if (!matches_any(path, c.target_modules)) {
    return false;
  }
  if (matches_any(path, c.exclude_modules)) return false;
  if (c.layers_to_transform.empty()) return true;
  const int64_t i = layer_index(path, c.layers_pattern);
  return i >= 0 && std::find(c.layers_to_transform.begin(), c.layers_to_transform.end(), i) != c.layers_to_transform.end();
}

}  // namespace

std::string lora_model_type(const Module& model) {
  const std::string t = model.type_name();
  if (t.rfind("ViT", 0) == 0) return "vit";
  if (t.rfind("GPT2", 0) == 0) return "gpt2";
  if (t.rfind("Llama", 0) == 0) return "llama";
  return "";
}

LoraState inject_lora(Module& model, LoraConfig c, const std::string& model_type) {
  if (c.target_modules.empty()) c.target_modules = default_targets(model_type.empty() ? lora_model_type(model) : model_type);
  c.validate();
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> targets, saved;
  for (auto& [path, m] : model.named_modules()) {
    if (path.empty()) continue;
    BOOSTER_CHECK(!dynamic_cast<LoraLinear*>(m.get()), "inject_lora: the model already has adapters ('", path, "')");
    if (!c.modules_to_save.empty() && matches_any(path, c.modules_to_save)) saved.emplace_back(path, m);
    if (!targeted(c, path, *m)) continue;
    BOOSTER_CHECK(is_linear(*m), "inject_lora: target module '", path, "' is a ", m->type_name(),
                  ", not supported: LoRA adapts Linear and Conv1D layers");
    targets.emplace_back(path, m);
  }
  std::string names;
  for (auto& t : c.target_modules) names += (names.empty() ? "" : ", ") + t;
  BOOSTER_CHECK(!targets.empty(), "inject_lora: target modules [", names, "] not found in the base model (",
                model.type_name(), "); check the target modules and try again");
  for (const std::string& s : c.modules_to_save)
    BOOSTER_CHECK(std::any_of(saved.begin(), saved.end(), [&](auto& p) { return ends_with_name(p.first, s); }),
                  "inject_lora: modules_to_save '", s, "' matches no module of the model");
  LoraState st;
  model.requires_grad_(false);
  // PEFT's correction, with its warning: a Conv1D stores [in, out] (fan_in_fan_out), a
  // Linear [out, in]; the config records what the layers are (as PEFT sets it).
  const bool conv1d_targets = dynamic_cast<const Conv1D*>(targets[0].second.get()) != nullptr;
  if (conv1d_targets != c.fan_in_fan_out) {
    spdlog::warn("LoRA: the target modules are {} layers: fan_in_fan_out set to {}", targets[0].second->type_name(),
                 conv1d_targets ? "true" : "false");
    c.fan_in_fan_out = conv1d_targets;
  }
  for (auto& [path, m] : targets) {
    const bool conv1d = dynamic_cast<const Conv1D*>(m.get()) != nullptr;
    BOOSTER_CHECK(conv1d == conv1d_targets, "inject_lora: the targets mix Conv1D ('", targets[0].first, "') and Linear ('",
                  conv1d ? targets[0].first : path, "') layers, which fan_in_fan_out cannot describe at once");
    const int64_t r = by_pattern(c.rank_pattern, path, c.r);
    const double alpha = by_pattern(c.alpha_pattern, path, c.lora_alpha);
    auto lora = std::make_shared<LoraLinear>(std::static_pointer_cast<UnaryModule>(m), r, alpha, c.lora_dropout,
                                             c.use_rslora, conv1d, c.init_lora_weights);
    model.replace(path, lora);
    st.adapted.push_back(path);
  }
  for (auto& [path, m] : saved) {
    m->requires_grad_(true);
    st.saved_modules.push_back(path);
  }
  for (auto& [name, p] : model.named_parameters()) {
    const bool is_bias = ends_with_name(name, "bias");
    if (is_bias && (c.bias == "all" || (c.bias == "lora_only" && name.find(".base_layer.bias") != std::string::npos)))
      Tensor(p).requires_grad_(true);
  }
  st.config = std::move(c);
  return st;
}

bool LoraState::is_adapter_tensor(const std::string& name) const {
  auto has = [&](const char* part) {
    return name.rfind(std::string(part).substr(1), 0) == 0 || name.find(part) != std::string::npos;
  };
  if (has(".lora_A.") || has(".lora_B.")) return true;
  for (const std::string& m : saved_modules)
    if (name.rfind(m + ".", 0) == 0) return true;
  if (!ends_with_name(name, "bias")) return false;
  if (config.bias == "all") return true;
  return config.bias == "lora_only" && name.find(".base_layer.bias") != std::string::npos;
}

StateDict trainable_parameters(const Module& model) {
  StateDict out;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

void load_lora_tensors(Module& model, const LoraState& state, const StateDict& file, const std::string& where) {
  std::map<std::string, Tensor> given;
  const std::string prefix = kPeftPrefix;
  for (auto& [k, t] : file) {
    BOOSTER_CHECK(k.rfind(prefix, 0) == 0, where, ": tensor '", k, "' lacks PEFT's '", prefix, "' prefix");
    given[k.substr(prefix.size())] = t;
  }
  NoGradGuard ng;
  std::set<std::string> used;
  for (auto& [name, p] : model.named_parameters()) {
    if (!state.is_adapter_tensor(name)) continue;
    auto it = given.find(name);
    BOOSTER_CHECK(it != given.end(), where, ": adapter tensor '", prefix, name, "' is missing");
    const Shape want = p.region() ? p.region()->full : p.shape();
    BOOSTER_CHECK_T(ShapeError, it->second.shape() == want, where, ": '", prefix, name, "' is ",
                    shape_str(it->second.shape()), " but the model's is ", shape_str(want),
                    " (adapters of another base model, or another r?)");
    BOOSTER_CHECK(!p.region(), where, ": load adapters before the model is sharded ('", name, "' is a shard)");
    Tensor(p).copy_(it->second.to(p.dtype()));
    used.insert(name);
  }
  for (auto& [k, t] : given)
    BOOSTER_CHECK(used.count(k), where, ": tensor '", prefix, k, "' is not an adapter tensor of this model");
}

std::vector<std::string> merge_and_unload(Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<LoraLinear>>> loras;
  for (auto& [path, m] : model.named_modules())
    if (auto l = std::dynamic_pointer_cast<LoraLinear>(m)) loras.emplace_back(path, l);
  std::vector<std::string> merged;
  NoGradGuard ng;
  for (auto& [path, l] : loras) {
    Tensor w = l->base_layer->get_tensor("weight");
    w.copy_(l->merged_weight());
    model.replace(path, l->base_layer.shared());
    merged.push_back(path);
  }
  return merged;
}

}  // namespace booster::nn
