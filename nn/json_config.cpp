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

}  // namespace booster::nn
