// Lazy initialization (see lazy.h).
#include "nn/lazy.h"

namespace booster::nn {

void materialize(Module& m) {
  for (auto& [n, t] : m.state_dict()) booster::materialize(t);  // parameters and buffers
}

bool is_lazy(const Module& m) {
  for (auto& [n, t] : m.state_dict())
    if (booster::is_lazy(t)) return true;
  return false;
}

}  // namespace booster::nn
