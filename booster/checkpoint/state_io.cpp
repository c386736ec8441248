// Collective state loading and optimizer shares (see state_io.h).
#include "booster/checkpoint/state_io.h"

#include <map>
#include <set>
#include <sstream>

#include "booster/checkpoint/world.h"

namespace booster::ckpt {

namespace {

// A tag for the error types that cross ranks, so every rank throws the same type.
std::string tagged(const std::exception& e) {
  if (dynamic_cast<const ValueError*>(&e)) return "V" + std::string(e.what());
  if (dynamic_cast<const ShapeError*>(&e)) return "S" + std::string(e.what());
  return "I" + std::string(e.what());
}

[[noreturn]] void rethrow(char tag, const std::string& msg) {
  if (tag == 'V') throw ValueError(msg);
  if (tag == 'S') throw ShapeError(msg);
  throw IOError(msg);
}

// Lines of text from every rank, joined (a rank's list once, duplicates dropped).
std::vector<std::string> union_lines(const World& w, const std::vector<std::string>& mine) {
  std::string packed;
  for (auto& s : mine) packed += s + '\n';
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto& all : w.all_gather(packed)) {
    std::istringstream in(all);
    for (std::string line; std::getline(in, line);)
      if (seen.insert(line).second) out.push_back(line);
  }
  return out;
}

}  // namespace

std::string LoadReport::str() const {
  std::string s;
  for (auto& k : missing) s += "\n  missing: " + k;
  for (auto& k : unexpected) s += "\n  unexpected: " + k;
  for (auto& k : mismatched) s += "\n  size mismatch: " + k;
  return s;
}

void on_every_rank(const std::function<void()>& f, const std::string& what, const dist::ProcessGroup* group) {
  World w;
  w.group = group;
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = tagged(e);
  }
  if (!w.multi) {
    if (!error.empty()) rethrow(error[0], error.substr(1));
    return;
  }
  const auto all = w.all_gather(error);
  std::string msg;
  char tag = 0;
  int failed = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    if (!tag) tag = all[r][0];
    ++failed;
    msg += "\n  rank " + std::to_string(r) + ": " + all[r].substr(1);
  }
  if (failed) rethrow(tag, what + " failed on " + std::to_string(failed) + " rank(s):" + msg);
}

namespace {
// State on the disk tier: read into RAM, then written behind (no more than one in RAM).
void load_into_source(CheckpointReader& r, const StateTensor& st) {
  Tensor t = Tensor::empty(st.source->shape, st.source->dtype);
  r.read(st.name, st.region, t);
  st.source->fill(t);
}
}  // namespace

LoadReport load_state(CheckpointReader& r, const ShardedState& dst, bool strict, const std::string& what) {
  const World w;
  LoadReport rep;
  std::vector<std::string> used;
  for (auto& st : dst) {
    const proto::TensorEntry* e = r.find(st.name);
    if (!e) {
      rep.missing.push_back(st.name);
      continue;
    }
    used.push_back(st.name);
    const Shape full = CheckpointReader::shape_of(*e);
    if (full != st.region.full)
      rep.mismatched.push_back(st.name + ": checkpoint " + shape_str(full) + " vs model " + shape_str(st.region.full));
  }
  rep.missing = union_lines(w, rep.missing);
  rep.mismatched = union_lines(w, rep.mismatched);
  std::set<std::string> any_used;
  for (auto& n : union_lines(w, used)) any_used.insert(n);
  for (auto& e : r.index().tensors())
    if (!any_used.count(e.name())) rep.unexpected.push_back(e.name());
  BOOSTER_CHECK(!strict || rep.ok(), what, " (strict):", rep.str());
  on_every_rank(
      [&] {
        std::set<std::string> bad;
        for (auto& m : rep.mismatched) bad.insert(m.substr(0, m.find(':')));
        for (auto& st : dst) {
          if (!r.find(st.name) || bad.count(st.name)) continue;
          if (!st.tensor.defined() && st.source) {
            load_into_source(r, st);
            continue;
          }
          Tensor t = st.tensor;
          if (t.is_contiguous()) {
            r.read(st.name, st.region, t);
          } else {
            Tensor tmp = Tensor::empty(t.shape(), t.dtype());
            r.read(st.name, st.region, tmp);
            t.detach().copy_(tmp);
          }
        }
      },
      what);
  return rep;
}

OptimizerShare optimizer_share(const OptimizerWrapper& o) {
  const World w;
  const OptimizerWrapper::CheckpointShare local = o.local_checkpoint_state();
  const optim::OptimizerStateDict& sd = local.dict;
  std::map<std::string, StateLayout> layout;
  for (auto& l : o.state_layout()) layout.emplace(l.name, l);
  OptimizerShare out;
  proto::OptimizerMeta mine;
  mine.set_type(sd.type);
  for (auto& g : sd.param_groups) {
    auto* pg = mine.add_groups();
    for (auto& [k, v] : g.options) (*pg->mutable_options())[k] = v;
    for (auto& n : g.param_names) pg->add_param_names(n);
  }
  for (auto& [k, v] : sd.extra) (*mine.mutable_extra())[k] = v;
  for (auto& [name, st] : sd.state) {
    (*mine.mutable_steps())[name] = st.step;
    auto it = layout.find(name);
    BOOSTER_CHECK(it != layout.end(), "save_optimizer: state for '", name, "', which the optimizer does not hold");
    for (auto& [k, t] : st.buffers) {
      BOOSTER_CHECK_T(ShapeError, t.numel() == it->second.region.numel(), "save_optimizer: state '", k, "' of '", name,
                      "' holds ", t.numel(), " elements, its parameter's share ", it->second.region.str());
      out.tensors.push_back({name + "/" + k, t, it->second.region});
    }
  }
  for (const StateTensor& st : local.on_disk) {  // read from the disk tier as they are written
    BOOSTER_CHECK_T(ShapeError, layout.count(st.name.substr(0, st.name.rfind('/'))), "save_optimizer: state '",
                    st.name, "' of a parameter the optimizer does not hold");
    out.tensors.push_back(st);
  }
  // Merge: groups by position (param names in rank order), steps by name, the rest from rank 0.
  bool first = true;
  for (auto& bytes : w.all_gather(mine.SerializeAsString())) {
    proto::OptimizerMeta m;
    BOOSTER_CHECK_T(IOError, m.ParseFromString(bytes), "save_optimizer: corrupt metadata from a rank");
    if (first) {
      out.meta = m;
      first = false;
      continue;
    }
    BOOSTER_CHECK(m.type() == out.meta.type() && m.groups_size() == out.meta.groups_size(), "save_optimizer: ranks hold ",
                  m.type(), " with ", m.groups_size(), " groups and ", out.meta.type(), " with ", out.meta.groups_size());
    for (int g = 0; g < m.groups_size(); ++g) {
      auto* dst = out.meta.mutable_groups(g);
      std::set<std::string> have(dst->param_names().begin(), dst->param_names().end());
      for (auto& n : m.groups(g).param_names())
        if (have.insert(n).second) dst->add_param_names(n);
    }
    for (auto& [n, s] : m.steps()) out.meta.mutable_steps()->insert({n, s});
  }
  return out;
}

void load_optimizer_share(CheckpointReader& r, OptimizerWrapper& o) {
  const World w;
  const proto::OptimizerMeta& meta = r.index().optimizer();
  const auto groups = o.unwrap()->param_groups();
  // Every parameter here must sit in the same group of the checkpoint; every parameter of
  // the checkpoint must be held by some rank.
  std::map<std::string, int> saved_group;
  for (int g = 0; g < meta.groups_size(); ++g)
    for (auto& n : meta.groups(g).param_names()) saved_group[n] = g;
  std::vector<std::string> held, problems;
  BOOSTER_CHECK(int(groups.size()) == meta.groups_size(), "load_optimizer: ", meta.groups_size(),
                " parameter groups saved, ", groups.size(), " in this ", o.unwrap()->type_name());
  for (size_t g = 0; g < groups.size(); ++g)
    for (auto& [n, p] : groups[g].params) {
      held.push_back(n);
      auto it = saved_group.find(n);
      if (it == saved_group.end()) problems.push_back("'" + n + "' has no state in the checkpoint");
      else if (it->second != int(g))
        problems.push_back("'" + n + "' is in group " + std::to_string(g) + " here, " + std::to_string(it->second) + " saved");
    }
  std::set<std::string> any_held;
  for (auto& n : union_lines(w, held)) any_held.insert(n);
  for (auto& [n, g] : saved_group)
    if (!any_held.count(n)) problems.push_back("the checkpoint holds '" + n + "', which no rank's optimizer has");
  problems = union_lines(w, problems);
  std::string msg;
  for (auto& p : problems) msg += "\n  " + p;
  BOOSTER_CHECK(problems.empty(), "load_optimizer from '", r.source(), "': the parameters do not match:", msg);

  on_every_rank(
      [&] {
        std::map<std::string, std::vector<std::string>> keys;  // parameter -> its state names
        for (auto& e : r.index().tensors()) {
          const auto slash = e.name().rfind('/');
          BOOSTER_CHECK_T(IOError, slash != std::string::npos, r.source(), ": optimizer tensor '", e.name(),
                          "' is not named <parameter>/<state>");
          keys[e.name().substr(0, slash)].push_back(e.name().substr(slash + 1));
        }
        // States the optimizer keeps on the disk tier go straight there, one at a time.
        std::set<std::string> direct;
        for (const StateTensor& st : o.local_load_targets(keys)) {
          load_into_source(r, st);
          direct.insert(st.name);
        }
        optim::OptimizerStateDict sd;
        sd.type = meta.type();
        for (auto& [k, v] : meta.extra()) sd.extra[k] = v;
        for (size_t g = 0; g < groups.size(); ++g) {
          optim::OptimizerStateDict::Group gs;
          for (auto& [k, v] : meta.groups(int(g)).options()) gs.options[k] = v;
          for (auto& [n, p] : groups[g].params) gs.param_names.push_back(n);
          sd.param_groups.push_back(std::move(gs));
        }
        for (auto& l : o.state_layout()) {
          auto step = meta.steps().find(l.name);
          if (step == meta.steps().end()) continue;  // saved before its first step
          optim::ParamState st{step->second, {}};
          for (auto& k : keys[l.name]) {
            if (direct.count(l.name + "/" + k)) continue;
            Tensor t = Tensor::empty(l.local_shape, DType::f32);
            r.read(l.name + "/" + k, l.region, t);
            st.buffers[k] = t;
          }
          sd.state[l.name] = std::move(st);
        }
        o.load_local_state_dict(sd);
      },
      "load_optimizer from '" + r.source() + "'");
}

}  // namespace booster::ckpt
