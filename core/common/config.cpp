// Config parsing, overrides and schema checks (see config.h).
#include "core/common/config.h"

#include <set>
#include <sstream>

#include "core/common/check.h"

namespace booster {

namespace {

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

const char* type_name(ConfigType t) {
  switch (t) {
    case ConfigType::integer: return "an integer";
    case ConfigType::floating: return "a number";
    case ConfigType::boolean: return "a boolean";
    case ConfigType::flag: return "a boolean (or 0 / 1)";
    case ConfigType::string: return "a string";
    case ConfigType::integer_list: return "a list of integers";
    case ConfigType::floating_list: return "a list of numbers";
    case ConfigType::string_list: return "a list of strings";
  }
  return "?";
}

const char* value_kind(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::string: return "a string";
    case toml::value_t::array: return "a list";
    case toml::value_t::table: return "a table";
    default: return "a date or time";
  }
}

bool matches(const toml::value& v, ConfigType t) {
  auto all = [&](auto pred) {
    if (!v.is_array()) return false;
    for (auto& e : v.as_array())
      if (!pred(e)) return false;
    return true;
  };
  switch (t) {
    case ConfigType::integer: return v.is_integer();
    case ConfigType::floating: return v.is_floating() || v.is_integer();
    case ConfigType::boolean: return v.is_boolean();
    case ConfigType::flag: return v.is_boolean() || (v.is_integer() && (v.as_integer() == 0 || v.as_integer() == 1));
    case ConfigType::string: return v.is_string();
    case ConfigType::integer_list: return all([](auto& e) { return e.is_integer(); });
    case ConfigType::floating_list: return all([](auto& e) { return e.is_floating() || e.is_integer(); });
    case ConfigType::string_list: return all([](auto& e) { return e.is_string(); });
  }
  return false;
}

// The table that holds the last part of a dotted key, created on the way when absent.
toml::value& parent_table(toml::value& root, const std::vector<std::string>& parts, const std::string& key) {
  toml::value* t = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto& tab = t->as_table();
    if (!tab.count(parts[i])) tab[parts[i]] = toml::table{};
    t = &tab[parts[i]];
    BOOSTER_CHECK(t->is_table(), key, ": '", parts[i], "' is not a table");
  }
  return *t;
}

// "must be >= 0, got -5" when a number lies outside the entry's range, else "".
std::string out_of_range(const toml::value& v, const ConfigSchema::Entry& e) {
  if (!v.is_integer() && !v.is_floating()) return "";
  const double x = v.is_integer() ? double(v.as_integer()) : v.as_floating();
  if (x >= e.min && x <= e.max) return "";
  auto num = [](double d) {
    std::ostringstream os;
    os << d;
    return os.str();
  };
  std::string want = e.max == HUGE_VAL ? ">= " + num(e.min)
                     : e.min == -HUGE_VAL ? "<= " + num(e.max)
                                          : "in [" + num(e.min) + ", " + num(e.max) + "]";
  return "must be " + want + ", got " + num(x);
}

std::string loc(const toml::value& v) {
  const auto l = v.location();
  return l.file_name() + ":" + std::to_string(l.line());
}

}  // namespace

ConfigSchema& ConfigSchema::add(const std::string& key, ConfigType t, toml::value def, std::string doc) {
  entries_[key] = Entry{t, std::move(def), true, false, std::move(doc)};
  return *this;
}

ConfigSchema& ConfigSchema::add_required(const std::string& key, ConfigType t, std::string doc) {
  entries_[key] = Entry{t, toml::value(), false, true, std::move(doc)};
  return *this;
}

ConfigSchema& ConfigSchema::open_table(const std::string& prefix) {
  open_.push_back(prefix);
  return *this;
}

ConfigSchema& ConfigSchema::range(const std::string& key, double min, double max) {
  auto it = entries_.find(key);
  BOOSTER_CHECK(it != entries_.end(), "ConfigSchema::range: add '", key, "' first");
  it->second.min = min, it->second.max = max;
  return *this;
}

bool ConfigSchema::is_open(const std::string& key) const {
  for (auto& p : open_)
    if (key == p || key.rfind(p + ".", 0) == 0) return true;
  return false;
}

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  Config c;
  c.name_ = path;
  try {
    c.root_ = toml::parse(path);
  } catch (const std::exception& e) {
    BOOSTER_THROW(IOError, "config '", path, "': ", e.what());
  }
  for (auto& o : overrides) c.set(o);
  return c;
}

Config Config::from_string(const std::string& text, const std::string& name, const std::vector<std::string>& overrides) {
  Config c;
  c.name_ = name;
  std::istringstream is(text);
  try {
    c.root_ = toml::parse(is, name);
  } catch (const std::exception& e) {
    BOOSTER_THROW(IOError, "config '", name, "': ", e.what());
  }
  for (auto& o : overrides) c.set(o);
  return c;
}

void Config::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  BOOSTER_CHECK(eq != std::string::npos && eq > 0, "--set '", assignment, "': expected key=value");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  toml::value v;
  try {
    std::istringstream is("v = " + text);
    v = toml::find(toml::parse(is, "--set " + key), "v");
  } catch (const std::exception&) {
    v = toml::value(text);  // a bare word: take it as a string
  }
  const auto parts = split_key(key);
  parent_table(root_, parts, "--set " + key).as_table()[parts.back()] = v;
  overridden_[key] = "--set " + key;
}

void Config::check(const toml::value& table, const std::string& prefix, const ConfigSchema& schema,
                   std::vector<std::string>& errors) const {
  for (auto& [k, v] : table.as_table()) {
    const std::string key = prefix.empty() ? k : prefix + "." + k;
    if (schema.is_open(key)) continue;
    auto it = schema.entries().find(key);
    if (it != schema.entries().end()) {
      if (!matches(v, it->second.type))
        errors.push_back(where(key) + ": key '" + key + "' must be " + type_name(it->second.type) + ", got " +
                         value_kind(v));
      else if (const std::string r = out_of_range(v, it->second); !r.empty())
        errors.push_back(where(key) + ": key '" + key + "' " + r);
      continue;
    }
    bool is_table_prefix = false;
    for (auto& [sk, se] : schema.entries()) is_table_prefix |= sk.rfind(key + ".", 0) == 0;
    if (v.is_table() && is_table_prefix) {
      check(v, key, schema, errors);
      continue;
    }
    std::string accepted;
    for (auto& [sk, se] : schema.entries()) {
      const std::string parent = sk.substr(0, sk.rfind('.') == std::string::npos ? 0 : sk.rfind('.'));
      if (parent == prefix) accepted += (accepted.empty() ? "" : ", ") + sk.substr(prefix.empty() ? 0 : prefix.size() + 1);
    }
    errors.push_back(where(key) + ": unknown key '" + key + "'" + (prefix.empty() ? "" : " in [" + prefix + "]") +
                     " (accepted: " + accepted + ")");
  }
}

void Config::apply(const ConfigSchema& schema) {
  std::vector<std::string> errors;
  check(root_, "", schema, errors);
  for (auto& [key, e] : schema.entries()) {
    if (find(key)) continue;
    if (e.required) {
      errors.push_back(name_ + ": required key '" + key + "' is missing" + (e.doc.empty() ? "" : " (" + e.doc + ")"));
    } else if (e.has_default) {
      const auto parts = split_key(key);
      parent_table(root_, parts, name_ + ": " + key).as_table()[parts.back()] = e.def;
    }
  }
  if (!errors.empty()) {
    std::string msg = "invalid config '" + name_ + "':";
    for (auto& e : errors) msg += "\n  " + e;
    BOOSTER_THROW(ValueError, msg);
  }
}

const toml::value* Config::find(const std::string& key) const {
  const toml::value* t = &root_;
  for (auto& p : split_key(key)) {
    if (!t->is_table()) return nullptr;
    auto& tab = t->as_table();
    auto it = tab.find(p);
    if (it == tab.end()) return nullptr;
    t = &it->second;
  }
  return t;
}

bool Config::has(const std::string& key) const { return find(key) != nullptr; }

bool Config::is_string(const std::string& key) const {
  const toml::value* v = find(key);
  return v != nullptr && v->is_string();
}

std::string Config::where(const std::string& key) const {
  auto o = overridden_.find(key);
  if (o != overridden_.end()) return o->second;
  const toml::value* v = find(key);
  return v ? loc(*v) : name_;
}

const toml::value& Config::need(const std::string& key, const char* type) const {
  const toml::value* v = find(key);
  BOOSTER_CHECK(v, name_, ": missing key '", key, "'");
  (void)type;
  return *v;
}

int64_t Config::get_int(const std::string& key) const {
  const auto& v = need(key, "integer");
  BOOSTER_CHECK(v.is_integer(), where(key), ": key '", key, "' must be an integer, got ", value_kind(v));
  return v.as_integer();
}

double Config::get_float(const std::string& key) const {
  const auto& v = need(key, "number");
  BOOSTER_CHECK(v.is_floating() || v.is_integer(), where(key), ": key '", key, "' must be a number, got ", value_kind(v));
  return v.is_integer() ? double(v.as_integer()) : v.as_floating();
}

bool Config::get_bool(const std::string& key) const {
  const auto& v = need(key, "boolean");
  BOOSTER_CHECK(v.is_boolean(), where(key), ": key '", key, "' must be a boolean, got ", value_kind(v));
  return v.as_boolean();
}

bool Config::get_flag(const std::string& key) const {
  const auto& v = need(key, "flag");
  BOOSTER_CHECK(matches(v, ConfigType::flag), where(key), ": key '", key, "' must be a boolean or 0 / 1, got ",
                v.is_integer() ? std::to_string(v.as_integer()) : std::string(value_kind(v)));
  return v.is_boolean() ? v.as_boolean() : v.as_integer() == 1;
}

std::string Config::get_string(const std::string& key) const {
  const auto& v = need(key, "string");
  BOOSTER_CHECK(v.is_string(), where(key), ": key '", key, "' must be a string, got ", value_kind(v));
  return v.as_string().str;
}

std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  const auto& v = need(key, "list");
  BOOSTER_CHECK(matches(v, ConfigType::integer_list), where(key), ": key '", key, "' must be a list of integers");
  std::vector<int64_t> out;
  for (auto& e : v.as_array()) out.push_back(e.as_integer());
  return out;
}

std::vector<double> Config::get_float_list(const std::string& key) const {
  const auto& v = need(key, "list");
  BOOSTER_CHECK(matches(v, ConfigType::floating_list), where(key), ": key '", key, "' must be a list of numbers");
  std::vector<double> out;
  for (auto& e : v.as_array()) out.push_back(e.is_integer() ? double(e.as_integer()) : e.as_floating());
  return out;
}

std::vector<std::string> Config::get_string_list(const std::string& key) const {
  const auto& v = need(key, "list");
  BOOSTER_CHECK(matches(v, ConfigType::string_list), where(key), ": key '", key, "' must be a list of strings");
  std::vector<std::string> out;
  for (auto& e : v.as_array()) out.push_back(e.as_string().str);
  return out;
}

std::vector<std::string> Config::keys(const std::string& table) const {
  const toml::value* t = table.empty() ? &root_ : find(table);
  std::vector<std::string> out;
  if (!t || !t->is_table()) return out;
  for (auto& [k, v] : t->as_table()) out.push_back(k);
  return out;
}

}  // namespace booster
