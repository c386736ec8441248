// Plugins by name, so a run config's [plugin] table chooses one without if-chains in user
// code. Adding a plugin: a folder under plugins/ and one entry in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "booster/plugin.h"
#include "core/common/config.h"

namespace booster::plugins {

/// Builds the plugin named by `<table>.name`, reading its options from the same table.
std::shared_ptr<Plugin> make_plugin(const Config& cfg, const std::string& table = "plugin");
/// Registered plugin names.
std::vector<std::string> plugin_names();

}  // namespace booster::plugins
