// Galvatron's strategy file (see plan.h).
#include "galvatron/plan.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/common/check.h"

namespace booster::galvatron {

using nlohmann::json;

DpKind dp_kind_from_name(const std::string& name, const std::string& where) {
  if (name == "ddp") return DpKind::ddp;
  if (name == "zero2") return DpKind::zero2;
  if (name == "zero3") return DpKind::zero3;
  BOOSTER_THROW(ValueError, where, ": a data-parallel type is ddp, zero2 or zero3, got '", name, "'");
}

std::string dp_kind_name(DpKind k) { return k == DpKind::ddp ? "ddp" : k == DpKind::zero2 ? "zero2" : "zero3"; }

std::string HybridPlan::where(const std::string& key) const {
  return source.empty() ? "[plugin] " + key : "'" + key + "' in " + source;
}

bool power_of_two(int64_t v) { return v >= 1 && (v & (v - 1)) == 0; }

namespace {

// An integer value (Galvatron writes some as numbers, some as strings).
int64_t int_of(const json& v, const std::string& where) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t used = 0;
    try {
      const int64_t n = std::stoll(s, &used);
      if (used == s.size()) return n;
    } catch (const std::exception&) {
    }
  }
  BOOSTER_THROW(ValueError, where, ": expected an integer, got ", v.dump());
}

// A CSV list of integers ("2,2,1") or a JSON array.
std::vector<int64_t> list_of(const json& v, const std::string& where) {
  std::vector<int64_t> out;
  if (v.is_array()) {
    for (auto& e : v) out.push_back(int_of(e, where));
    return out;
  }
  if (v.is_number_integer()) return {v.get<int64_t>()};
  BOOSTER_CHECK(v.is_string(), where, ": expected a comma-separated list of integers, got ", v.dump());
  std::stringstream in(v.get<std::string>());
  for (std::string item; std::getline(in, item, ',');) out.push_back(int_of(json(item), where));
  return out;
}

std::string csv(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

HybridPlan HybridPlan::from_json_file(const std::string& path) {
  std::ifstream in(path);
  BOOSTER_CHECK_T(IOError, in.good(), "galvatron_config_path: cannot read the strategy file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path);
}

HybridPlan HybridPlan::from_json(const std::string& text, const std::string& source) {
  HybridPlan p;
  p.source = source;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    BOOSTER_THROW(ValueError, "the strategy file ", source, " is not JSON: ", e.what());
  }
  BOOSTER_CHECK(j.is_object(), "the strategy file ", source, " must hold a JSON object, got ", j.type_name());
  static const std::set<std::string> known{"pp_deg", "tp_sizes_enc", "tp_consecutive_flags", "dp_types_enc",
                                           "use_sp", "checkpoint", "global_bsz", "chunks", "pp_division",
                                           "pipeline_type", "default_dp_type", "vtp", "vsp", "embed_sdp",
                                           "world_size", "cp_sizes_enc", "vcp"};
  for (auto& [k, v] : j.items())
    BOOSTER_CHECK(known.count(k), "unknown key '", k, "' in the strategy file ", source,
                  " (Galvatron's keys: pp_deg, tp_sizes_enc, tp_consecutive_flags, dp_types_enc, checkpoint, "
                  "global_bsz, chunks, pp_division, pipeline_type, default_dp_type, vtp, embed_sdp, use_sp, vsp)");
  for (const char* k : {"pp_deg", "tp_sizes_enc"})
    BOOSTER_CHECK(j.contains(k), "the strategy file ", source, " has no '", k, "'");
  auto get = [&](const std::string& k) { return int_of(j.at(k), p.where(k)); };
  p.pp_deg = int(get("pp_deg"));
  const auto tps = list_of(j.at("tp_sizes_enc"), p.where("tp_sizes_enc"));
  p.layers.resize(tps.size());
  for (size_t i = 0; i < tps.size(); ++i) p.layers[i].tp = int(tps[i]);
  auto per_layer = [&](const std::string& k, auto set) {
    if (!j.contains(k)) return;
    const auto v = list_of(j.at(k), p.where(k));
    BOOSTER_CHECK(v.size() == tps.size(), p.where(k), " lists ", v.size(), " layers, tp_sizes_enc ", tps.size());
    for (size_t i = 0; i < v.size(); ++i) {
      BOOSTER_CHECK(v[i] == 0 || v[i] == 1, p.where(k), ": layer ", i, " has ", v[i], ", expected 0 or 1");
      set(p.layers[i], v[i] == 1);
    }
  };
  per_layer("tp_consecutive_flags", [](LayerStrategy& s, bool b) { s.tp_consec = b; });
  per_layer("dp_types_enc", [](LayerStrategy& s, bool b) { s.sdp = b; });
  per_layer("checkpoint", [](LayerStrategy& s, bool b) { s.checkpoint = b; });
  per_layer("use_sp", [](LayerStrategy& s, bool b) { s.sp = b; });
  if (j.contains("cp_sizes_enc"))
    for (int64_t c : list_of(j.at("cp_sizes_enc"), p.where("cp_sizes_enc")))
      BOOSTER_CHECK(c == 1, p.where("cp_sizes_enc"), ": context parallelism is not implemented; every value must be 1");
  if (j.contains("vsp")) {
    const int64_t v = get("vsp");
    BOOSTER_CHECK(v == 0 || v == 1, p.where("vsp"), ": expected 0 or 1, got ", v);
    p.vsp = v == 1;
  }
  if (j.contains("vcp"))
    BOOSTER_CHECK(get("vcp") == 1, p.where("vcp"), ": context parallelism is not implemented; use 1");
  if (j.contains("global_bsz")) p.global_bsz = get("global_bsz");
  if (j.contains("chunks")) p.chunks = get("chunks");
  if (j.contains("pp_division")) p.pp_division = list_of(j.at("pp_division"), p.where("pp_division"));
  if (j.contains("vtp")) p.vtp = int(get("vtp"));
  if (j.contains("embed_sdp")) p.embed_sdp = get("embed_sdp") != 0;
  auto str = [&](const std::string& k, std::string& out) {
    if (!j.contains(k)) return;
    BOOSTER_CHECK(j.at(k).is_string(), p.where(k), ": expected a string, got ", j.at(k).dump());
    out = j.at(k).get<std::string>();
  };
  str("pipeline_type", p.pipeline_type);
  str("default_dp_type", p.default_dp_type);
  if (j.contains("world_size")) p.world_size = int(get("world_size"));
  return p;
}

std::string HybridPlan::to_json() const {
  std::vector<int64_t> tp, consec, dp, ckpt, sp;
  for (auto& l : layers) {
    tp.push_back(l.tp), consec.push_back(l.tp_consec), dp.push_back(l.sdp), ckpt.push_back(l.checkpoint);
    sp.push_back(l.ulysses());
  }
  json j;
  j["pp_deg"] = pp_deg;
  j["tp_sizes_enc"] = csv(tp);
  j["tp_consecutive_flags"] = csv(consec);
  j["dp_types_enc"] = csv(dp);
  j["use_sp"] = csv(sp);
  j["checkpoint"] = csv(ckpt);
  j["global_bsz"] = global_bsz;
  j["chunks"] = chunks;
  j["pp_division"] = csv(stage_layers());
  j["pipeline_type"] = pipeline_type;
  j["default_dp_type"] = default_dp_type;
  j["vtp"] = vtp;
  j["vsp"] = int(vsp);
  j["embed_sdp"] = int(embed_sdp);
  if (world_size > 0) j["world_size"] = world_size;
  return j.dump(4);
}

void HybridPlan::write_json(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    BOOSTER_CHECK_T(IOError, out.good(), "cannot write the strategy file '", path, "'");
    out << to_json() << "\n";
    BOOSTER_CHECK_T(IOError, out.good(), "cannot write the strategy file '", path, "'");
  }
  BOOSTER_CHECK_T(IOError, std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "'");
}

std::vector<int64_t> HybridPlan::stage_layers() const {
  if (!pp_division.empty()) return pp_division;
  const int64_t n = int64_t(layers.size()), each = n / pp_deg;
  std::vector<int64_t> out(size_t(pp_deg), each);
  out.back() += n - each * pp_deg;
  return out;
}

int64_t HybridPlan::in_flight(int stage_index) const {
  if (pp_deg == 1) return 1;
  const int64_t m = std::max<int64_t>(chunks, 1);
  return pipeline_type == "gpipe" ? m : std::min<int64_t>(pp_deg - stage_index, m);
}

void HybridPlan::validate(int world, int64_t num_layers) const {
  BOOSTER_CHECK(world_size == 0 || world_size == world, where("world_size"), ": the plan is for ", world_size,
                " ranks; this run has ", world);
  BOOSTER_CHECK(power_of_two(pp_deg) && world % pp_deg == 0, where("pp_deg"), ": ", pp_deg,
                " must be a power of two dividing the world size ", world);
  const int stage = world / pp_deg;
  BOOSTER_CHECK(int64_t(layers.size()) == num_layers, where("tp_sizes_enc"), " lists ", layers.size(),
                " layers; the model has ", num_layers, " transformer layers");
  int min_tp = vtp;
  for (size_t i = 0; i < layers.size(); ++i) {
    const int t = layers[i].tp;
    BOOSTER_CHECK(power_of_two(t) && stage % t == 0, where("tp_sizes_enc"), ": layer ", i, " has tensor-parallel degree ",
                  t, "; with pp_deg ", pp_deg, " it must be a power of two dividing world / pp_deg = ", stage,
                  " (the degrees must multiply into the world size ", world, ")");
    min_tp = std::min(min_tp, t);
  }
  BOOSTER_CHECK(power_of_two(vtp) && stage % vtp == 0, where("vtp"), ": ", vtp,
                " must be a power of two dividing world / pp_deg = ", stage);
  const auto per = stage_layers();
  int64_t sum = 0;
  for (int64_t v : per) {
    BOOSTER_CHECK(v >= 1, where("pp_division"), ": every stage needs at least one layer, got ", v);
    sum += v;
  }
  BOOSTER_CHECK(int64_t(per.size()) == pp_deg && sum == num_layers, where("pp_division"), " gives ", per.size(),
                " stages and ", sum, " layers; pp_deg is ", pp_deg, " and the model has ", num_layers);
  BOOSTER_CHECK(chunks >= 1 || chunks == -1, where("chunks"), ": must be >= 1 (or -1: micro-batches of 4 rows), got ", chunks);
  BOOSTER_CHECK(pp_deg == 1 || chunks == -1 || chunks >= pp_deg, where("chunks"), ": ", chunks,
                " micro-batches cannot fill ", pp_deg, " pipeline stages (pp_deg); give at least pp_deg");
  BOOSTER_CHECK(pipeline_type == "gpipe" || pipeline_type == "pipedream_flush", where("pipeline_type"),
                ": gpipe or pipedream_flush, got '", pipeline_type, "'");
  dp_kind_from_name(default_dp_type, where("default_dp_type"));
  const int64_t shards = stage / min_tp;
  BOOSTER_CHECK(global_bsz >= 0 && global_bsz % shards == 0, where("global_bsz"), ": ", global_bsz,
                " must divide by world / (pp_deg x min tp) = ", shards, " (every layer's data-parallel group gets whole rows)");
}

std::string HybridPlan::describe(const LayerStrategy& s, int world) const {
  const int stage = world / pp_deg, dp = stage / s.tp;
  std::string out = std::to_string(pp_deg) + "-" + std::to_string(s.tp);
  const bool both = s.tp > 1 && dp > 1;
  if (both && s.tp_consec) out += "*";
  out += "-" + std::to_string(dp);
  if (both && !s.tp_consec) out += "*";
  const DpKind k = dp_kind(s);
  const int sharded = s.ulysses() ? stage : dp;  // Ulysses: whole weights, data parallel over the stage
  if (sharded > 1 && k == DpKind::zero3) out += "f";
  if (sharded > 1 && k == DpKind::zero2) out += "z2";
  if (s.checkpoint) out += "-c";
  if (s.ulysses()) out += "-sp";
  return out;
}

std::string HybridPlan::summary(int world) const {
  std::string out;
  size_t i = 0;
  while (i < layers.size()) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[i]) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(i) + (j > i ? "-" + std::to_string(j) : "") + ": " +
           describe(layers[i], world);
    i = j + 1;
  }
  out += "; vtp " + std::to_string(vtp) + (vsp && vtp > 1 ? " (Ulysses)" : "") + ", " + pipeline_type + ", chunks " +
         std::to_string(chunks);
  if (pp_deg > 1) {
    std::string div;
    for (int64_t n : stage_layers()) div += (div.empty() ? "" : ",") + std::to_string(n);
    out += ", stages " + div;
  }
  return out;
}

}  // namespace booster::galvatron
