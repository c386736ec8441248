// LoRA (PEFT's LoraConfig and lora.Linear): low-rank adapters beside a model's frozen
// linear layers. inject_lora wraps every targeted Linear (or GPT-2's Conv1D) in a
// LoraLinear that keeps the layer as its `base_layer` and adds
//   y = base_layer(x) + lora_B(lora_A(lora_dropout(x))) * scaling,  scaling = lora_alpha / r
// (lora_alpha / sqrt(r) with use_rslora), lora_A [r, in] Kaiming-uniform and lora_B
// [out, r] zero as PEFT initializes them, and freezes everything else but the biases the
// `bias` mode names and the `modules_to_save`. Parameter names are PEFT's with the adapter
// name left out (`...query.base_layer.weight`, `...query.lora_A.weight`), which is how
// PEFT's adapter_model.safetensors names them after its `base_model.model.` prefix.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dist/process_group.h"
#include "nn/layers.h"

namespace booster::nn {

/// PEFT's LoraConfig: its field names and defaults.
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0.0;
  /// Module names (a module whose path is a name or ends in ".name"), or, with
  /// target_modules_regex, one regular expression the whole path must match; ["all-linear"]:
  /// every Linear and Conv1D but the output layer (lm_head). Empty: the model type's
  /// PEFT default (vit: query, value; gpt2: c_attn; llama: q_proj, v_proj).
  std::vector<std::string> target_modules;
  bool target_modules_regex = false;
  /// Paths (or ends of paths, as target_modules) left out even where a target matches.
  std::vector<std::string> exclude_modules;
  bool fan_in_fan_out = false;  // the base stores its weight [in, out] (GPT-2's Conv1D)
  std::string bias = "none";    // "none", "all" or "lora_only": which biases train
  bool use_rslora = false;
  std::vector<std::string> modules_to_save;  // trained whole and saved with the adapters
  std::string init_lora_weights = "true";    // "true" (Kaiming-uniform A, zero B), "gaussian", "false"
  std::vector<int64_t> layers_to_transform;  // only these layer indices (empty: all)
  std::vector<std::string> layers_pattern;   // the layer list's name (empty: PEFT's common ones)
  std::map<std::string, int64_t> rank_pattern;  // regex of a path's end -> r
  std::map<std::string, double> alpha_pattern;  // regex of a path's end -> lora_alpha
  std::string base_model_name_or_path;
  std::string task_type;  // PEFT's, written back ("CAUSAL_LM", ...); not acted on

  /// Values PEFT would refuse (r < 1, an unknown bias mode, ...): ValueError naming them.
  void validate() const;
  /// adapter_config.json as PEFT writes it (peft_type "LORA").
  std::string to_json_string() const;
  /// From an adapter_config.json: PEFT's keys; settings this project cannot honor (use_dora,
  /// loftq_config, a peft_type other than LORA) refused by name, PEFT's bookkeeping keys
  /// (revision, inference_mode, ...) accepted, anything else refused naming the key.
  static LoraConfig from_json_string(const std::string& text, const std::string& where = "adapter_config.json");
  static LoraConfig from_json_file(const std::string& path);
};

/// A linear layer with a low-rank adapter (PEFT's lora.Linear). The base is a Linear or a
/// Conv1D (fan_in_fan_out), whole or tensor-parallel: after a policy shards the base,
/// shard_like_base() splits the adapter the same way (column-parallel: lora_B's rows;
/// row-parallel: lora_A's columns, the partial [.., r] products summed over the group).
class LoraLinear : public UnaryModule {
 public:
  LoraLinear(std::shared_ptr<UnaryModule> base, int64_t r, double lora_alpha, double lora_dropout, bool use_rslora,
             bool fan_in_fan_out, const std::string& init_lora_weights);
  std::string type_name() const override { return "LoraLinear"; }
  Tensor forward(const Tensor& x) override;

  /// Splits the adapter to match a tensor-parallel base (its weight's region over `tp`);
  /// `who` names the layer in errors. A base that is whole leaves the adapter whole.
  /// Returns whether the adapter's input is split over tp (a row-parallel base).
  bool shard_like_base(const dist::ProcessGroup* tp, const std::string& who);
  /// The base's weight folded with the adapter: W + scaling * (B A) (transposed for
  /// fan_in_fan_out), the shape of the base's weight (this rank's part of a sharded one).
  Tensor merged_weight() const;
  int64_t r() const { return r_; }
  double scaling() const { return scaling_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool fan_in_fan_out() const { return fan_in_fan_out_; }

  Slot<UnaryModule> base_layer;
  Slot<Linear> lora_A, lora_B;
  Slot<UnaryModule> lora_dropout;

 protected:
  std::shared_ptr<Module> fresh() const override;

 private:
  int64_t r_, in_, out_;
  double alpha_, dropout_, scaling_;
  bool rslora_, fan_in_fan_out_;
  std::string init_;
  enum class Split { none, column, row } split_ = Split::none;
  const dist::ProcessGroup* tp_ = nullptr;
  bool gather_output_ = false;  // a column-parallel base that all-gathers its output
};

/// What inject_lora did, for saving the adapters later.
struct LoraState {
  LoraConfig config;
  std::vector<std::string> adapted;         // paths of the LoraLinear modules
  std::vector<std::string> saved_modules;   // paths of the modules_to_save modules
  /// Whether a parameter (by its dotted name) belongs in adapter_model.safetensors: the
  /// adapters, the biases the bias mode trains, the modules_to_save's parameters.
  bool is_adapter_tensor(const std::string& name) const;
};

/// PEFT's get_peft_model: wraps the target modules of `model` in LoraLinear (the config's
/// rank and alpha, or their rank_pattern / alpha_pattern entries), freezes the rest but
/// the bias mode's biases and the modules_to_save. `model_type` picks the default
/// targets when the config names none ("vit", "gpt2", "llama"). ValueError when a target
/// matches nothing, matches a module that is not a linear layer, or the model already has
/// adapters.
LoraState inject_lora(Module& model, LoraConfig config, const std::string& model_type = "");

/// The model type PEFT's default targets are keyed by, from a root module's type name
/// ("vit", "gpt2", "llama"), or "".
std::string lora_model_type(const Module& model);

/// Parameters that train (requires_grad), for an optimizer built after inject_lora.
StateDict trainable_parameters(const Module& model);

/// Copies PEFT's adapter tensors (names with the `base_model.model.` prefix, adapter name
/// left out) into `model`: every adapter tensor of the model must be given, of its shape
/// (adapters of another base model are refused naming the tensor and both shapes);
/// `where` names the file in errors.
void load_lora_tensors(Module& model, const LoraState& state, const StateDict& file, const std::string& where);

/// PEFT's merge_and_unload: every LoraLinear replaced by its base layer with the adapter
/// folded into the weight (each rank its part where the layers are sharded), the rest of
/// the model untouched; the parameters keep their requires_grad. Returns the paths merged.
std::vector<std::string> merge_and_unload(Module& model);

/// The LoraConfig of `dir`/adapter_config.json, or none when the folder has none (a LoRA
/// run's checkpoint step folder has one).
std::optional<LoraConfig> saved_lora_config(const std::string& dir);

/// The prefix PEFT's adapter files put before a module path.
inline constexpr const char* kPeftPrefix = "base_model.model.";

}  // namespace booster::nn
