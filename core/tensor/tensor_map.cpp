// TensorMap helpers (see tensor_map.h).
#include "core/tensor/tensor_map.h"

namespace booster {

std::string describe_keys(const TensorMap& m) {
  std::string out;
  for (auto& [k, t] : m) {
    out += (out.empty() ? "" : ", ") + k;
    out += t.defined() ? " " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) : " (undefined)";
  }
  return out;
}

}  // namespace booster
