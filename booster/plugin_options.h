// Reading a plugin's options from its config table: every plugin binds its Colossal-AI
// arguments once (OptionBinder) and reads them here, so a wrong key or type is refused the
// same way under every plugin, naming the file and line. The registry builds plugins from
// configs; plugins include this, not the registry.
#pragma once

#include <string>
#include <type_traits>

#include "booster/grad_scaler.h"
#include "core/common/config.h"
#include "core/common/option_binder.h"

namespace booster {

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
/// backoff_factor, growth_interval, hysteresis, max_scale) to the GradScalerOptions that
/// `scaler` reaches (a field of O, or of a struct O embeds).
template <typename O>
OptionBinder<O>& bind_loss_scale(OptionBinder<O>& b, std::function<GradScalerOptions&(O&)> scaler) {
  auto at = [scaler](auto member) {
    return [scaler, member](O& o) -> decltype(auto) { return scaler(o).*member; };
  };
  return b.template add_ref<double>("initial_scale", at(&GradScalerOptions::initial_scale))
      .template add_ref<double>("min_scale", at(&GradScalerOptions::min_scale))
      .template add_ref<double>("growth_factor", at(&GradScalerOptions::growth_factor))
      .template add_ref<double>("backoff_factor", at(&GradScalerOptions::backoff_factor))
      .template add_ref<int64_t>("growth_interval", at(&GradScalerOptions::growth_interval))
      .template add_ref<int64_t>("hysteresis", at(&GradScalerOptions::hysteresis))
      .template add_ref<double>("max_scale", at(&GradScalerOptions::max_scale));
}
template <typename O>
OptionBinder<O>& bind_loss_scale(OptionBinder<O>& b, std::type_identity_t<GradScalerOptions O::*> field) {
  return bind_loss_scale<O>(b, [field](O& o) -> GradScalerOptions& { return o.*field; });
}

}  // namespace booster
