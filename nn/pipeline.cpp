// PipelineModule helpers (see pipeline.h).
#include "nn/pipeline.h"

namespace booster::nn {

const Tensor& need(const TensorMap& m, const std::string& key, const std::string& who) {
  auto it = m.find(key);
  if (it != m.end() && it->second.defined()) return it->second;
  std::string keys;
  for (auto& [k, t] : m) keys += (keys.empty() ? "" : ", ") + k;
  BOOSTER_THROW(ValueError, who, ": needs the tensor '", key, "', got {", keys, "}");
}

}  // namespace booster::nn
