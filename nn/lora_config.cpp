// LoraConfig: checks, and PEFT's adapter_config.json (see lora.h).
#include <filesystem>
#include <set>

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "nn/json_config.h"
#include "nn/lora.h"

namespace booster::nn {

using nlohmann::json;

void LoraConfig::validate() const {
  BOOSTER_CHECK(r > 0, "LoraConfig: r must be a positive integer, got ", r);
  BOOSTER_CHECK(lora_dropout >= 0 && lora_dropout < 1, "LoraConfig: lora_dropout must be in [0, 1), got ", lora_dropout);
  BOOSTER_CHECK(bias == "none" || bias == "all" || bias == "lora_only", "LoraConfig: bias '", bias,
                "' is not one of none, all, lora_only");
  BOOSTER_CHECK(init_lora_weights == "true" || init_lora_weights == "false" || init_lora_weights == "gaussian",
                "LoraConfig: init_lora_weights '", init_lora_weights,
                "' is not supported here (true, false, gaussian; PEFT's pissa, olora, loftq, eva are not)");
  BOOSTER_CHECK(!target_modules_regex || target_modules.size() == 1,
                "LoraConfig: a regex target_modules is one expression, got ", target_modules.size());
  for (auto& [k, v] : rank_pattern) BOOSTER_CHECK(v > 0, "LoraConfig: rank_pattern '", k, "' gives r = ", v);
  BOOSTER_CHECK(layers_to_transform.empty() || !target_modules_regex,
                "LoraConfig: layers_to_transform does not apply to a regex target_modules (as PEFT)");
  for (int64_t i : layers_to_transform) BOOSTER_CHECK(i >= 0, "LoraConfig: layers_to_transform holds ", i);
}

std::string LoraConfig::to_json_string() const {
  json j;
  j["peft_type"] = "LORA";
  j["r"] = r;
  j["lora_alpha"] = lora_alpha;
  j["lora_dropout"] = lora_dropout;
  if (target_modules_regex) j["target_modules"] = target_modules.at(0);
  else if (target_modules.size() == 1 && target_modules[0] == "all-linear") j["target_modules"] = "all-linear";
  else j["target_modules"] = target_modules;
  j["exclude_modules"] = exclude_modules.empty() ? json(nullptr) : json(exclude_modules);
  j["fan_in_fan_out"] = fan_in_fan_out;
  j["bias"] = bias;
  j["use_rslora"] = use_rslora;
  j["use_dora"] = false;
  j["modules_to_save"] = modules_to_save.empty() ? json(nullptr) : json(modules_to_save);
  j["init_lora_weights"] = init_lora_weights == "gaussian" ? json("gaussian") : json(init_lora_weights == "true");
  j["layers_to_transform"] = layers_to_transform.empty() ? json(nullptr) : json(layers_to_transform);
  j["layers_pattern"] = layers_pattern.empty() ? json(nullptr) : json(layers_pattern);
  j["rank_pattern"] = json::object();
  for (auto& [k, v] : rank_pattern) j["rank_pattern"][k] = v;
  j["alpha_pattern"] = json::object();
  for (auto& [k, v] : alpha_pattern) j["alpha_pattern"][k] = v;
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path);
  j["task_type"] = task_type.empty() ? json(nullptr) : json(task_type);
  j["inference_mode"] = true;
  j["revision"] = nullptr;
  return j.dump(2) + "\n";
}

namespace {

// A key PEFT writes that is a string or a list of strings (null: empty).
std::vector<std::string> strings(const json& v, const char* key, const std::string& where, bool* was_string = nullptr) {
  if (was_string) *was_string = v.is_string();
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  BOOSTER_CHECK(v.is_array(), where, ": ", key, " must be a string, a list of strings or null");
  std::vector<std::string> out;
  for (auto& e : v) {
    BOOSTER_CHECK(e.is_string(), where, ": ", key, " holds a non-string entry ", e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// One key of adapter_config.json into c.
void read_key(LoraConfig& c, const std::string& key, const json& v, const std::string& where) {
  if (key == "r") c.r = v.get<int64_t>();
  else if (key == "lora_alpha") c.lora_alpha = v.get<double>();
  else if (key == "lora_dropout") c.lora_dropout = v.get<double>();
  else if (key == "target_modules") c.target_modules = strings(v, "target_modules", where, &c.target_modules_regex);
  else if (key == "exclude_modules") c.exclude_modules = strings(v, "exclude_modules", where);
  else if (key == "fan_in_fan_out") c.fan_in_fan_out = v.get<bool>();
  else if (key == "bias") c.bias = v.get<std::string>();
  else if (key == "use_rslora") c.use_rslora = v.get<bool>();
  else if (key == "modules_to_save") c.modules_to_save = strings(v, "modules_to_save", where);
  else if (key == "init_lora_weights") c.init_lora_weights = v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.get<std::string>();
  else if (key == "layers_to_transform") c.layers_to_transform = v.is_number() ? std::vector<int64_t>{v.get<int64_t>()} : v.get<std::vector<int64_t>>();
  else if (key == "layers_pattern") c.layers_pattern = strings(v, "layers_pattern", where);
  else if (key == "rank_pattern") c.rank_pattern = v.get<std::map<std::string, int64_t>>();
  else if (key == "alpha_pattern") c.alpha_pattern = v.get<std::map<std::string, double>>();
  else if (key == "base_model_name_or_path") c.base_model_name_or_path = v.get<std::string>();
  else if (key == "task_type") c.task_type = v.get<std::string>();
  else BOOSTER_THROW(ValueError, where, ": key '", key, "' is not one of LoraConfig's");
}

}  // namespace

LoraConfig LoraConfig::from_json_string(const std::string& text, const std::string& where) {
  const json j = parse_config_json(text, where);
  const std::string type = j.value("peft_type", std::string("LORA"));
  BOOSTER_CHECK(type == "LORA", where, ": peft_type '", type, "' is not LORA");
  BOOSTER_CHECK(!j.value("use_dora", false), where, ": use_dora (DoRA) is not supported");
  // PEFT's variants this project does not implement: refused when set, not ignored.
  for (const char* k : {"loftq_config", "megatron_config", "layer_replication", "use_qalora", "lora_bias",
                        "target_parameters", "trainable_token_indices"})
    BOOSTER_CHECK(!j.contains(k) || j[k].is_null() || j[k].empty() || j[k] == false, where, ": ", k, " = ",
                  j[k].dump(), " asks for a PEFT variant that is not supported");
  static const std::set<std::string> bookkeeping = {
      "peft_type", "use_dora", "loftq_config", "inference_mode", "revision", "auto_mapping", "megatron_config",
      "megatron_core", "layer_replication", "runtime_config", "use_qalora", "qalora_group_size", "lora_bias",
      "corda_config", "eva_config", "trainable_token_indices", "target_parameters", "peft_version"};
  LoraConfig c;
  for (auto& [key, v] : j.items()) {
    if (bookkeeping.count(key) || (v.is_null() && key != "target_modules")) continue;
    try {
      read_key(c, key, v, where);
    } catch (const json::exception& e) {
      BOOSTER_THROW(ValueError, where, ": key '", key, "': ", e.what());
    }
  }
  // "all-linear" is PEFT's keyword, not a regex.
  if (c.target_modules_regex && c.target_modules.size() == 1 && c.target_modules[0] == "all-linear")
    c.target_modules_regex = false;
  c.validate();
  return c;
}

LoraConfig LoraConfig::from_json_file(const std::string& path) { return from_json_string(read_text_file(path), path); }

std::optional<LoraConfig> saved_lora_config(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "adapter_config.json";
  if (!std::filesystem::exists(p)) return std::nullopt;
  return LoraConfig::from_json_file(p.string());
}

}  // namespace booster::nn
