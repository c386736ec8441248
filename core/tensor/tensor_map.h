// TensorMap: named tensors — a batch, what one pipeline stage sends the next, a model's
// outputs handed to a criterion.
#pragma once

#include <map>
#include <string>

#include "core/tensor/tensor.h"

namespace booster {

using TensorMap = std::map<std::string, Tensor>;

}  // namespace booster
