// The plugin registry (see registry.h).
#include "plugins/registry.h"

#include <functional>
#include <map>

#include "plugins/galvatron/galvatron_plugin.h"
#include "plugins/gemini/gemini_plugin.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/torch_ddp/torch_ddp_plugin.h"
#include "plugins/torch_fsdp/torch_fsdp_plugin.h"

namespace booster::plugins {

namespace {
using Factory = std::function<std::shared_ptr<Plugin>(const Config&, const std::string&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> f{
      {"torch_ddp",
       [](const Config& c, const std::string& t) {
         return std::make_shared<TorchDDPPlugin>(TorchDDPOptions::from_config(c, t));
       }},
      {"galvatron",
       [](const Config& c, const std::string& t) {
         return std::make_shared<GalvatronPlugin>(GalvatronOptions::from_config(c, t));
       }},
      {"gemini",
       [](const Config& c, const std::string& t) {
         return std::make_shared<GeminiPlugin>(GeminiOptions::from_config(c, t));
       }},
      {"hybrid_parallel",
       [](const Config& c, const std::string& t) {
         return std::make_shared<HybridParallelPlugin>(HybridParallelOptions::from_config(c, t));
       }},
      {"torch_fsdp",
       [](const Config& c, const std::string& t) {
         return std::make_shared<TorchFSDPPlugin>(TorchFSDPOptions::from_config(c, t));
       }},
      {"low_level_zero",
       [](const Config& c, const std::string& t) {
         return std::make_shared<LowLevelZeroPlugin>(LowLevelZeroOptions::from_config(c, t));
       }},
  };
  return f;
}
}  // namespace

std::vector<std::string> plugin_names() {
  std::vector<std::string> n;
  for (auto& [k, v] : factories()) n.push_back(k);
  return n;
}

std::shared_ptr<Plugin> make_plugin(const Config& cfg, const std::string& table) {
  BOOSTER_CHECK(cfg.has(table + ".name"), cfg.name(), ": [", table, "] needs a name (one of: ",
                [] {
                  std::string s;
                  for (auto& n : plugin_names()) s += (s.empty() ? "" : ", ") + n;
                  return s;
                }(),
                ")");
  const std::string name = cfg.get_string(table + ".name");
  auto it = factories().find(name);
  if (it == factories().end()) {
    std::string s;
    for (auto& n : plugin_names()) s += (s.empty() ? "" : ", ") + n;
    BOOSTER_THROW(ValueError, cfg.where(table + ".name"), ": unknown plugin '", name, "' (known: ", s, ")");
  }
  return it->second(cfg, table);
}

}  // namespace booster::plugins
