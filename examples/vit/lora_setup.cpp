// The [lora] table (see lora_setup.h).
#include "lora_setup.h"

#include "core/common/file_util.h"
#include "core/dist/logger.h"

namespace booster::examples {

void add_lora_schema(ConfigSchema& s) {
  using T = ConfigType;
  s.add("lora.r", T::integer, 0, "LoRA's rank (PEFT's r); 0: no adapters, the whole model trains")
      .add("lora.lora_alpha", T::floating, 8.0, "scaling = lora_alpha / r")
      .add("lora.lora_dropout", T::floating, 0.0)
      .add("lora.target_modules", T::string_list, toml::array{},
           "module names (or [\"all-linear\"]); empty: PEFT's default for the model (vit: query, value; gpt2: "
           "c_attn; llama: q_proj, v_proj)")
      .add("lora.modules_to_save", T::string_list, toml::array{}, "modules trained whole and saved with the adapters")
      .add("lora.bias", T::string, "none", "none, all or lora_only")
      .add("lora.use_rslora", T::boolean, false, "scaling = lora_alpha / sqrt(r)")
      .add("lora.init_lora_weights", T::string, "true", "true (A Kaiming-uniform, B zero), gaussian or false")
      .add("lora.layers_to_transform", T::integer_list, toml::array{}, "only these layer indices (empty: all)")
      .add("lora.pretrained_dir", T::string, "", "continue from saved adapters (PEFT's folder; its config wins)");
  s.range("lora.r", 0);
  s.range("lora.lora_dropout", 0);
}

bool lora_enabled(const Config& cfg) { return cfg.get_int("lora.r") > 0 || !cfg.get_string("lora.pretrained_dir").empty(); }

void enable_lora_from_config(Booster& booster, const std::shared_ptr<nn::Module>& model, const Config& cfg) {
  if (!lora_enabled(cfg)) return;
  LoraOptions o;
  o.pretrained_dir = cfg.get_string("lora.pretrained_dir");
  if (o.pretrained_dir.empty()) {
    nn::LoraConfig c;
    c.r = cfg.get_int("lora.r");
    c.lora_alpha = cfg.get_float("lora.lora_alpha");
    c.lora_dropout = cfg.get_float("lora.lora_dropout");
    c.target_modules = cfg.get_string_list("lora.target_modules");
    c.modules_to_save = cfg.get_string_list("lora.modules_to_save");
    c.bias = cfg.get_string("lora.bias");
    c.use_rslora = cfg.get_bool("lora.use_rslora");
    c.init_lora_weights = cfg.get_string("lora.init_lora_weights");
    c.layers_to_transform = cfg.get_int_list("lora.layers_to_transform");
    if (cfg.has("model.pretrained")) c.base_model_name_or_path = cfg.get_string("model.pretrained");
    o.lora_config = c;
  }
  booster.enable_lora(model, o);
}

SideFiles with_lora_side_file(SideFiles inner, const Booster& booster) {
  const nn::LoraState* lora = booster.lora_state();
  if (!lora) return inner;
  const std::string config = lora->config.to_json_string();
  return [inner = std::move(inner), config](const std::string& step_dir) {
    std::vector<std::string> files = inner ? inner(step_dir) : std::vector<std::string>{};
    write_file_atomic((std::filesystem::path(step_dir) / "adapter_config.json").string(), config);
    files.push_back("adapter_config.json");
    return files;
  };
}

void save_lora_from_config(Booster& booster, ModelWrapper& model, const Config& cfg, const std::filesystem::path& run_dir) {
  if (!lora_enabled(cfg)) return;
  booster.save_lora_as_pretrained(model, (run_dir / "lora").string());
  dist::logger().info("LoRA adapters (PEFT's adapter_config.json, adapter_model.safetensors) in {}",
                      (run_dir / "lora").string());
}

}  // namespace booster::examples
