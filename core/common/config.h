// Run configs in TOML (toml11): one file describes plugin, model, data and training;
// `--set key=value` overrides any key; a schema names the accepted keys, their types and
// defaults. An unknown key or a wrong type is an error naming the key, the file and line,
// and the accepted keys.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <toml.hpp>
#include <vector>

namespace booster {

/// flag: a boolean, or the integers 0 and 1 (Galvatron's command-line switches, `--sdp 1`).
enum class ConfigType { integer, floating, boolean, flag, string, integer_list, floating_list, string_list };

/// The accepted keys of a config.
class ConfigSchema {
 public:
  /// Accepts `key` (dotted, e.g. "train.batch_size") of type t, filled with `def` when absent.
  ConfigSchema& add(const std::string& key, ConfigType t, toml::value def, std::string doc = "");
  /// Accepts `key` with no default (required when `required`, else may stay absent).
  ConfigSchema& add_required(const std::string& key, ConfigType t, std::string doc = "");
  /// Accepts any key below `prefix` (checked later by whoever reads that table).
  ConfigSchema& open_table(const std::string& prefix);
  /// Numeric `key` (added before) must lie in [min, max]; an error names the key, where it
  /// was set and the value.
  ConfigSchema& range(const std::string& key, double min, double max = HUGE_VAL);

  struct Entry {
    ConfigType type;
    toml::value def;
    bool has_default = false;
    bool required = false;
    std::string doc;
    double min = -HUGE_VAL, max = HUGE_VAL;  // numeric keys: the accepted range
  };
  const std::map<std::string, Entry>& entries() const { return entries_; }
  bool is_open(const std::string& key) const;

 private:
  std::map<std::string, Entry> entries_;
  std::vector<std::string> open_;
};

/// A parsed config with the location of every value.
class Config {
 public:
  /// Parses a TOML file and applies "key=value" overrides; IOError names the file and line.
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides = {});
  /// Parses TOML text; `name` stands for the file in messages.
  static Config from_string(const std::string& text, const std::string& name = "<config>",
                            const std::vector<std::string>& overrides = {});

  /// Sets a dotted key from "key=value" (value in TOML syntax; bare words are strings).
  void set(const std::string& assignment);
  /// Checks every key against the schema (all problems in one ValueError) and fills defaults.
  void apply(const ConfigSchema& schema);

  bool has(const std::string& key) const;
  /// True when the key holds a string (FSDP's mixed_precision may be a table instead).
  bool is_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // integers accepted
  bool get_bool(const std::string& key) const;
  /// A ConfigType::flag key: true, false, 1 or 0.
  bool get_flag(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<double> get_float_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  /// Keys directly below a table ("plugin" -> "name", "tp_size", ...).
  std::vector<std::string> keys(const std::string& table) const;
  /// "run.toml:12" or "--set plugin.tp_size" for a key.
  std::string where(const std::string& key) const;
  const std::string& name() const { return name_; }
  const toml::value& root() const { return root_; }

 private:
  const toml::value* find(const std::string& key) const;
  const toml::value& need(const std::string& key, const char* type) const;
  void check(const toml::value& table, const std::string& prefix, const ConfigSchema& schema,
             std::vector<std::string>& errors) const;

  toml::value root_ = toml::table{};
  std::string name_;
  std::map<std::string, std::string> overridden_;  // key -> "--set key"
};

}  // namespace booster
