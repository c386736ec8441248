// Reading a Hugging Face config.json: the text parsed with errors naming the file, and each
// key read when present (a missing or null key keeps the default, as transformers' configs
// do; a key of the wrong type is an error naming the key and the file).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/common/check.h"

namespace booster::nn {

/// The JSON object in `text` (`where` names the source in errors).
nlohmann::json parse_config_json(const std::string& text, const std::string& where);

/// The model_type of a config.json's text ("" when it names none).
std::string config_model_type(const std::string& text, const std::string& where);

/// Sets `out` from j[key] when present and not null.
template <typename T>
void read_config_key(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    out = j[key].get<T>();
  } catch (const nlohmann::json::exception& e) {
    BOOSTER_THROW(ValueError, where, ": key '", key, "' has the wrong type (", j[key].type_name(), "): ", e.what());
  }
}

}  // namespace booster::nn
