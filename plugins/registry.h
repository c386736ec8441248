// Plugins by name, so a run config's [plugin] table chooses one without if-chains in user
// code. Adding a plugin: a folder under plugins/ and one entry in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "booster/grad_scaler.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "core/common/option_binder.h"

namespace booster::plugins {

/// Builds the plugin named by `<table>.name`, reading its options from the same table.
std::shared_ptr<Plugin> make_plugin(const Config& cfg, const std::string& table = "plugin");
/// Registered plugin names.
std::vector<std::string> plugin_names();

/// A copy of cfg with `table` checked against the plugin's schema (unknown keys and wrong
/// types refused, naming file and line; defaults filled); other tables are left to their
/// readers.
Config checked_table(const Config& cfg, ConfigSchema schema, const std::string& table);

/// A plugin's options from its [table] (name = `plugin`): the binder's keys only, each of
/// its type, defaults filled; unknown keys and wrong types refused naming file and line.
template <typename O>
O options_from(const Config& cfg, const std::string& table, const std::string& plugin, const OptionBinder<O>& b) {
  ConfigSchema s = b.schema(table);
  s.add(table + ".name", ConfigType::string, plugin);
  return b.read(checked_table(cfg, s, table), table);
}

/// Binds Colossal-AI's loss-scale arguments (initial_scale, min_scale, growth_factor,
/// backoff_factor, growth_interval, hysteresis, max_scale) to a GradScalerOptions field.
template <typename O>
OptionBinder<O>& bind_loss_scale(OptionBinder<O>& b, GradScalerOptions O::*field) {
  auto at = [field](auto member) {
    return [field, member](O& o) -> decltype(auto) { return (o.*field).*member; };
  };
  return b.template add_ref<double>("initial_scale", at(&GradScalerOptions::initial_scale))
      .template add_ref<double>("min_scale", at(&GradScalerOptions::min_scale))
      .template add_ref<double>("growth_factor", at(&GradScalerOptions::growth_factor))
      .template add_ref<double>("backoff_factor", at(&GradScalerOptions::backoff_factor))
      .template add_ref<int64_t>("growth_interval", at(&GradScalerOptions::growth_interval))
      .template add_ref<int64_t>("hysteresis", at(&GradScalerOptions::hysteresis))
      .template add_ref<double>("max_scale", at(&GradScalerOptions::max_scale));
}

}  // namespace booster::plugins
