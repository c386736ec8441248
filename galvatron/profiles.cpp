// Galvatron's profile files (see profiles.h).
#include "galvatron/profiles.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/check.h"
#include "core/common/file_util.h"

namespace booster::galvatron {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  BOOSTER_CHECK_T(IOError, in.good(), "cannot read the profile '", path,
                  "' (run galvatron_profile_hardware / galvatron_profile_model on this machine first)");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    BOOSTER_THROW(ValueError, "the profile '", path, "' is not JSON: ", e.what());
  }
}

void write_json(const std::string& path, const json& j) { write_file_atomic(path, j.dump(4) + "\n"); }

double number(const json& j, const std::string& key, const std::string& path) {
  BOOSTER_CHECK(j.contains(key) && j.at(key).is_number(), "the profile '", path, "' has no number '", key, "'");
  return j.at(key).get<double>();
}

double share(const json& j, const std::string& key, const std::string& path) {
  const double v = number(j, key, path);
  BOOSTER_CHECK(v >= 0 && v <= 1, "the profile '", path, "': '", key, "' must be a share in [0, 1], got ", v);
  return v;
}

std::string suffix(int nodes, int per_node) {
  return std::to_string(nodes) + "nodes_" + std::to_string(per_node) + "gpus_per_node.json";
}

// The value of the nearest key (by log distance), scaled by `scale(from, to)`.
double nearest(const std::map<int, double>& m, int key, const char* what, double exponent) {
  BOOSTER_CHECK(!m.empty(), "the model profile has no ", what);
  auto it = m.find(key);
  if (it != m.end()) return it->second;
  const auto* best = &*m.begin();
  for (auto& kv : m)
    if (std::abs(std::log2(double(kv.first)) - std::log2(double(key))) <
        std::abs(std::log2(double(best->first)) - std::log2(double(key))))
      best = &kv;
  return best->second * std::pow(double(best->first) / double(key), exponent);
}

}  // namespace

std::string HardwareProfile::allreduce_file(int nodes, int per_node) { return "allreduce_bandwidth_" + suffix(nodes, per_node); }
std::string HardwareProfile::p2p_file(int nodes, int per_node) { return "p2p_bandwidth_" + suffix(nodes, per_node); }

HardwareProfile HardwareProfile::read(const std::string& dir, int nodes, int per_node) {
  HardwareProfile h;
  const std::string a = (fs::path(dir) / allreduce_file(nodes, per_node)).string();
  const json aj = read_json(a);
  for (auto& [k, v] : aj.items()) {
    BOOSTER_CHECK(v.is_number() && v.get<double>() > 0, "the profile '", a, "': '", k, "' must be a positive number");
    h.allreduce_busbw[k] = v.get<double>();
  }
  const std::string p = (fs::path(dir) / p2p_file(nodes, per_node)).string();
  const json pj = read_json(p);
  for (auto& [k, v] : pj.items()) {
    BOOSTER_CHECK(k.rfind("pp_size_", 0) == 0 && v.is_number() && v.get<double>() > 0, "the profile '", p, "': '", k,
                  "' must be pp_size_<n> with a positive number");
    h.p2p_bw[std::stoi(k.substr(8))] = v.get<double>();
  }
  const std::string o = (fs::path(dir) / "overlap_coefficient.json").string();
  h.overlap_coe = number(read_json(o), "overlap_coe", o);
  return h;
}

void HardwareProfile::write(const std::string& dir, int nodes, int per_node) const {
  fs::create_directories(dir);
  json a(allreduce_busbw), p = json::object();
  for (auto& [n, bw] : p2p_bw) p["pp_size_" + std::to_string(n)] = bw;
  write_json((fs::path(dir) / allreduce_file(nodes, per_node)).string(), a);
  write_json((fs::path(dir) / p2p_file(nodes, per_node)).string(), p);
  write_json((fs::path(dir) / "overlap_coefficient.json").string(), json{{"overlap_coe", overlap_coe}});
}

double HardwareProfile::allreduce_ms(double mb, int n, bool consec) const {
  if (n <= 1 || mb <= 0) return 0;
  auto it = allreduce_busbw.find("allreduce_size_" + std::to_string(n) + "_consec_" + (consec ? "1" : "0"));
  if (it == allreduce_busbw.end()) it = allreduce_busbw.find("allreduce_size_" + std::to_string(n) + "_consec_1");
  BOOSTER_CHECK(it != allreduce_busbw.end(), "the hardware profile has no all-reduce bandwidth for groups of ", n,
                " ranks; profile this world size");
  return mb * 2.0 * (n - 1) / n / it->second;  // MB / (GB/s) = ms
}

double HardwareProfile::p2p_ms(double mb, int pp) const {
  if (mb <= 0) return 0;
  BOOSTER_CHECK(!p2p_bw.empty(), "the hardware profile has no point-to-point bandwidth");
  auto it = p2p_bw.lower_bound(pp);
  if (it == p2p_bw.end()) --it;
  return mb / it->second;
}

std::string ModelProfile::computation_file(const std::string& precision, const std::string& model) {
  return "computation_profiling_" + precision + "_" + model + ".json";
}
std::string ModelProfile::memory_file(const std::string& precision, const std::string& model) {
  return "memory_profiling_" + precision + "_" + model + ".json";
}

double ModelProfile::at_degree(const std::map<int, double>& m, int tp, const char* what) const {
  BOOSTER_CHECK(max_tp == 0 || tp <= max_tp, "the model profile of ", model, " allows tensor parallelism up to ", max_tp,
                " (its attention heads), not ", tp);
  return nearest(m, tp, what, 1.0);
}
double ModelProfile::fwd_ms(int tp) const { return at_degree(fwd_ms_per_sample, tp, "forward times"); }
double ModelProfile::fwd_bwd_ms(int tp) const {
  return fwd_bwd_ms_per_sample.empty() ? 3 * fwd_ms(tp) : at_degree(fwd_bwd_ms_per_sample, tp, "backward times");
}
double ModelProfile::act_mb(int tp) const { return at_degree(act_mb_per_sample, tp, "activation sizes"); }
double ModelProfile::sp_fwd_ms(int n) const { return at_degree(sp_fwd_ms_per_sample, n, "Ulysses forward times"); }
double ModelProfile::sp_fwd_bwd_ms(int n) const {
  return at_degree(sp_fwd_bwd_ms_per_sample, n, "Ulysses backward times");
}
double ModelProfile::sp_act_mb(int n) const { return at_degree(sp_act_mb_per_sample, n, "Ulysses activation sizes"); }
double ModelProfile::checkpoint_backward_mb(int tp) const {
  if (checkpoint_backward_mb_per_sample <= 0) return act_mb(tp);
  return checkpoint_backward_mb_per_sample * act_mb(tp) / act_mb(1);
}

void ModelProfile::write(const std::string& dir) const {
  fs::create_directories(dir);
  const std::string tag = "_bsz" + std::to_string(profiled_batch) + "_seq" + std::to_string(seq);
  json c;
  c["layertype_0" + tag] = fwd_ms(1);
  for (auto& [t, f] : fwd_ms_per_sample) c["layertype_0_tp" + std::to_string(t) + tag] = f;
  for (auto& [t, f] : fwd_bwd_ms_per_sample) c["layertype_0_fwd_bwd_tp" + std::to_string(t) + tag] = f;
  for (auto& [n, f] : sp_fwd_ms_per_sample) c["layertype_0_sp" + std::to_string(n) + tag] = f;
  for (auto& [n, f] : sp_fwd_bwd_ms_per_sample) c["layertype_0_fwd_bwd_sp" + std::to_string(n) + tag] = f;
  c["layertype_other" + tag] = other_fwd_ms_per_sample;
  c["layertype_other_fwd_bwd" + tag] = other_fwd_bwd_ms_per_sample;
  c["optimizer_ms_per_param"] = optimizer_ms_per_param;
  c["zero3_ms_per_layer"] = zero3_ms_per_layer;
  c["zero3_group"] = zero3_group;
  c["max_tp_deg"] = max_tp;
  c["sequence_parallel"] = int(sequence_parallel);
  c["layertype_other_embed_share"] = embed_time_share;
  c["hidden_size"] = hidden, c["seq_length"] = seq, c["batch_size"] = profiled_batch;
  write_json((fs::path(dir) / computation_file(precision, model)).string(), c);
  json acts = json::object();
  for (auto& [t, a] : act_mb_per_sample) acts[std::to_string(t)] = a;
  acts["checkpoint"] = checkpoint_act_mb_per_sample;
  acts["checkpoint_backward"] = checkpoint_backward_mb_per_sample;
  json m;
  m["layertype_0"] = {{"parameter_size", param_count * 4.0 / (1 << 20)}, {"parameter_count", param_count},
                      {"tp_activation_per_bsz_dict", acts}};
  if (has_sp()) {
    json sp = json::object();
    for (auto& [n, a] : sp_act_mb_per_sample) sp[std::to_string(n)] = a;
    m["layertype_0"]["sp_activation_per_bsz_dict"] = sp;
  }
  m["other_memory"] = {{"parameter_count", other_param_count}, {"activation_per_bsz", other_act_mb_per_sample},
                       {"embed_parameter_share", embed_param_share}, {"embed_activation_share", embed_act_share},
                       {"runtime_mb", runtime_mb}, {"optimizer_mb_per_param", optimizer_mb_per_param}};
  write_json((fs::path(dir) / memory_file(precision, model)).string(), m);
}

ModelProfile ModelProfile::read(const std::string& dir, const std::string& precision, const std::string& model) {
  ModelProfile p;
  p.model = model, p.precision = precision;
  const std::string cpath = (fs::path(dir) / computation_file(precision, model)).string();
  const json c = read_json(cpath);
  p.hidden = int64_t(number(c, "hidden_size", cpath)), p.seq = int64_t(number(c, "seq_length", cpath));
  p.profiled_batch = int64_t(number(c, "batch_size", cpath));
  const std::string tag = "_bsz" + std::to_string(p.profiled_batch) + "_seq" + std::to_string(p.seq);
  for (auto& [k, v] : c.items()) {
    if (k.rfind("layertype_0_tp", 0) == 0) p.fwd_ms_per_sample[std::stoi(k.substr(14))] = v.get<double>();
    if (k.rfind("layertype_0_fwd_bwd_tp", 0) == 0) p.fwd_bwd_ms_per_sample[std::stoi(k.substr(22))] = v.get<double>();
    if (k.rfind("layertype_0_sp", 0) == 0) p.sp_fwd_ms_per_sample[std::stoi(k.substr(14))] = v.get<double>();
    if (k.rfind("layertype_0_fwd_bwd_sp", 0) == 0) p.sp_fwd_bwd_ms_per_sample[std::stoi(k.substr(22))] = v.get<double>();
  }
  if (c.contains("layertype_other_fwd_bwd" + tag)) p.other_fwd_bwd_ms_per_sample = number(c, "layertype_other_fwd_bwd" + tag, cpath);
  if (c.contains("optimizer_ms_per_param")) p.optimizer_ms_per_param = number(c, "optimizer_ms_per_param", cpath);
  if (c.contains("zero3_ms_per_layer")) p.zero3_ms_per_layer = number(c, "zero3_ms_per_layer", cpath);
  if (c.contains("zero3_group")) p.zero3_group = int(number(c, "zero3_group", cpath));
  if (c.contains("max_tp_deg")) p.max_tp = int(number(c, "max_tp_deg", cpath));
  if (c.contains("sequence_parallel")) p.sequence_parallel = number(c, "sequence_parallel", cpath) != 0;
  if (c.contains("layertype_other_embed_share")) p.embed_time_share = share(c, "layertype_other_embed_share", cpath);
  if (p.fwd_ms_per_sample.empty()) p.fwd_ms_per_sample[1] = number(c, "layertype_0" + tag, cpath);
  p.other_fwd_ms_per_sample = number(c, "layertype_other" + tag, cpath);
  const std::string mpath = (fs::path(dir) / memory_file(precision, model)).string();
  const json m = read_json(mpath);
  BOOSTER_CHECK(m.contains("layertype_0") && m.contains("other_memory"), "the profile '", mpath,
                "' needs layertype_0 and other_memory");
  const json& l = m.at("layertype_0");
  p.param_count = number(l, "parameter_count", mpath);
  for (auto& [k, v] : l.at("tp_activation_per_bsz_dict").items()) {
    if (k == "checkpoint") p.checkpoint_act_mb_per_sample = v.get<double>();
    else if (k == "checkpoint_backward") p.checkpoint_backward_mb_per_sample = v.get<double>();
    else p.act_mb_per_sample[std::stoi(k)] = v.get<double>();
  }
  if (l.contains("sp_activation_per_bsz_dict"))
    for (auto& [k, v] : l.at("sp_activation_per_bsz_dict").items()) p.sp_act_mb_per_sample[std::stoi(k)] = v.get<double>();
  BOOSTER_CHECK(p.sp_fwd_ms_per_sample.size() == p.sp_act_mb_per_sample.size() &&
                    p.sp_fwd_bwd_ms_per_sample.size() == p.sp_fwd_ms_per_sample.size(),
                "the profiles '", cpath, "' and '", mpath, "' disagree on the Ulysses degrees they hold");
  const json& o = m.at("other_memory");
  p.other_param_count = number(o, "parameter_count", mpath);
  p.other_act_mb_per_sample = number(o, "activation_per_bsz", mpath);
  p.runtime_mb = number(o, "runtime_mb", mpath);
  if (o.contains("optimizer_mb_per_param")) p.optimizer_mb_per_param = number(o, "optimizer_mb_per_param", mpath);
  if (o.contains("embed_parameter_share")) p.embed_param_share = share(o, "embed_parameter_share", mpath);
  if (o.contains("embed_activation_share")) p.embed_act_share = share(o, "embed_activation_share", mpath);
  return p;
}

}  // namespace booster::galvatron
