// OptionBinder: one list that binds the keys of a config table to the fields of an options
// struct, giving both the schema (types, and defaults taken from the struct's defaults)
// and the reading. Plugins declare their Colossal-AI arguments once.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/common/config.h"

namespace booster {

template <typename O>
class OptionBinder {
 public:
  /// Binds key to a field (int, int64_t, double, bool, std::string or a list of integers)
  /// of O or of a base O extends (the ZeRO options a plugin's options embed).
  template <typename T, typename C>
    requires std::is_base_of_v<C, O>
  OptionBinder& add(const std::string& key, T C::*field, std::string doc = "") {
    return add_ref<T>(key, [field](O& o) -> T& { return o.*field; }, std::move(doc));
  }
  /// Binds key to field `member` of the struct field `outer` (HybridParallel's zero_stage is
  /// its embedded ZeRO options' stage).
  template <typename T, typename S>
  OptionBinder& add(const std::string& key, S O::*outer, T S::*member, std::string doc = "") {
    return add_ref<T>(key, [outer, member](O& o) -> T& { return (o.*outer).*member; }, std::move(doc));
  }
  /// Binds key to a bool field that also takes 0 and 1 (ConfigType::flag): a switch its
  /// system writes as an integer (Galvatron's `--sdp 1`).
  template <typename C>
    requires std::is_base_of_v<C, O>
  OptionBinder& add_flag(const std::string& key, bool C::*field, std::string doc = "") {
    add<bool>(key, field, std::move(doc));
    fields_.back().flag = true;
    return *this;
  }
  /// Binds key to a nested field through an accessor, e.g. [](O& o) -> double& { return o.scaler.initial_scale; }.
  template <typename T>
  OptionBinder& add_ref(const std::string& key, std::function<T&(O&)> ref, std::string doc = "") {
    fields_.push_back({key, std::move(doc), Ref(std::move(ref))});
    return *this;
  }

  /// The keys below `table`, with their types and the defaults of `defaults`.
  ConfigSchema schema(const std::string& table, O defaults = O{}) const {
    ConfigSchema s;
    for (auto& f : fields_) {
      std::visit(
          [&](auto& ref) {
            auto& v = ref(defaults);
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>)
              s.add(table + "." + f.key, f.flag ? ConfigType::flag : ConfigType::boolean, v, f.doc);
            else if constexpr (std::is_same_v<T, std::string>) s.add(table + "." + f.key, ConfigType::string, v, f.doc);
            else if constexpr (std::is_same_v<T, double>) s.add(table + "." + f.key, ConfigType::floating, v, f.doc);
            else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
              s.add(table + "." + f.key, ConfigType::integer_list, toml::array(v.begin(), v.end()), f.doc);
            else s.add(table + "." + f.key, ConfigType::integer, int64_t(v), f.doc);
          },
          f.ref);
    }
    return s;
  }
  /// The options a checked table holds (every key present: the schema filled defaults).
  O read(const Config& cfg, const std::string& table) const {
    O o{};
    for (auto& f : fields_) {
      const std::string key = table + "." + f.key;
      std::visit(
          [&](auto& ref) {
            auto& v = ref(o);
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) v = f.flag ? cfg.get_flag(key) : cfg.get_bool(key);
            else if constexpr (std::is_same_v<T, std::string>) v = cfg.get_string(key);
            else if constexpr (std::is_same_v<T, double>) v = cfg.get_float(key);
            else if constexpr (std::is_same_v<T, std::vector<int64_t>>) v = cfg.get_int_list(key);
            else v = T(cfg.get_int(key));
          },
          f.ref);
    }
    return o;
  }

 private:
  using Ref = std::variant<std::function<int&(O&)>, std::function<int64_t&(O&)>, std::function<double&(O&)>,
                           std::function<bool&(O&)>, std::function<std::string&(O&)>,
                           std::function<std::vector<int64_t>&(O&)>>;
  struct Field {
    std::string key, doc;
    Ref ref;
    bool flag = false;  // a bool that takes 0 / 1 too
  };
  std::vector<Field> fields_;
};

}  // namespace booster
