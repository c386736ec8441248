// Plugin option tables (see plugin_options.h).
#include "booster/plugin_options.h"

namespace booster {

Config checked_table(const Config& cfg_in, ConfigSchema schema, const std::string& table) {
  Config cfg = cfg_in;
  for (auto& top : cfg.keys(""))
    if (top != table) schema.open_table(top);
  cfg.apply(schema);
  return cfg;
}

}  // namespace booster
