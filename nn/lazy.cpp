// Lazy initialization (see lazy.h).
#include "nn/lazy.h"

namespace booster::nn {

void materialize(Module& m) {
  for (bool params : {true, false})
    for (auto& [n, t] : params ? m.named_parameters() : m.named_buffers()) booster::materialize(t);
}

bool is_lazy(const Module& m) {
  for (bool params : {true, false})
    for (auto& [n, t] : params ? m.named_parameters() : m.named_buffers())
      if (booster::is_lazy(t)) return true;
  return false;
}

}  // namespace booster::nn
