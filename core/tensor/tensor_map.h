// TensorMap: named tensors — a batch, what one pipeline stage sends the next, a model's
// outputs handed to a criterion.
#pragma once

#include <map>
#include <string>

#include "core/tensor/tensor.h"

namespace booster {

using TensorMap = std::map<std::string, Tensor>;

/// "input_ids [4, 8] i64, labels [4, 8] i64": each key with its shape and dtype, for messages.
std::string describe_keys(const TensorMap& m);

}  // namespace booster
