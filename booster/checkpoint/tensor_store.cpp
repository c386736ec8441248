// Whole-tensor checkpoint helpers (see tensor_store.h).
#include "booster/checkpoint/tensor_store.h"

namespace booster::ckpt {

void save_tensors(const std::string& path, const nn::StateDict& tensors, const SaveOptions& opts) {
  ShardedState state;
  for (auto& [name, t] : tensors) state.push_back({name, t, Region::whole(t.shape())});
  save_state(path, state, opts);
}

LoadedTensors load_tensors(const std::string& path, const std::string& kind, const std::string& prefix) {
  CheckpointReader r(path, kind, prefix);
  LoadedTensors out;
  out.index = r.index();
  out.source = r.source();
  for (auto& e : r.index().tensors()) out.tensors.emplace_back(e.name(), r.read_whole(e.name()));
  return out;
}

}  // namespace booster::ckpt
