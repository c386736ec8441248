// A model that can run as pipeline stages without the plugin knowing its type: it says
// how many layers the stages divide among themselves, which of its modules a stage holds,
// and runs one stage on named tensors (the batch on the first stage, what the previous
// stage sent on the others). ViTForImageClassification and Sequential implement it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor/tensor_map.h"

namespace booster::nn {

/// One stage's share of a model (one model chunk when interleaved).
struct StageSpec {
  int64_t layer_begin = 0, layer_end = 0;  // the layers [begin, end) it runs
  bool first = true, last = true;          // it reads the batch / produces the outputs
};

class PipelineModule {
 public:
  virtual ~PipelineModule() = default;
  /// Number of layers the stages divide among themselves.
  virtual int64_t num_pipeline_layers() const = 0;
  /// Dotted paths of the modules a stage holds: its layers, plus the input layers on the
  /// first stage and the output layers on the last.
  virtual std::vector<std::string> stage_modules(const StageSpec& s) const = 0;
  /// Runs a stage: the first reads its batch keys, the others "hidden_states"; returns
  /// {"hidden_states"}, or the model's outputs on the last stage.
  virtual TensorMap stage_forward(const TensorMap& inputs, const StageSpec& s) = 0;
};

/// The tensor named `key` of a map; ValueError naming what is there when absent.
const Tensor& need(const TensorMap& m, const std::string& key, const std::string& who);

}  // namespace booster::nn
