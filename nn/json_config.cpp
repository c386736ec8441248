// Reading a Hugging Face config.json (see json_config.h).
#include "nn/json_config.h"

namespace booster::nn {

nlohmann::json parse_config_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    BOOSTER_THROW(IOError, where, ": not valid JSON: ", e.what());
  }
  BOOSTER_CHECK_T(IOError, j.is_object(), where, ": expected a JSON object");
  return j;
}

std::string config_model_type(const std::string& text, const std::string& where) {
  const nlohmann::json j = parse_config_json(text, where);
  return j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
}

}  // namespace booster::nn
