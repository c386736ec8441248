// Models on named tensors, whatever their type. A PipelineModule can run as pipeline stages
// without the plugin knowing its type: it says how many layers the stages divide among
// themselves, which of its modules a stage holds, and runs one stage on named tensors (the
// batch on the first stage, what the previous stage sent on the others);
// ViTForImageClassification and Sequential implement it. A MapModule is any model called
// on named tensors (Python's model(**batch)). forward_named runs either, or a UnaryModule
// on "input", as the whole model: what Booster's one-stage step calls.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor/tensor_map.h"
#include "nn/module.h"

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
  /// Parameters the first and the last stage both hold (a head tied to the token
  /// embeddings, Megatron's shared word embeddings): the schedule sums their gradients over
  /// the two after each step, so both copies take the same steps; the norm counts the
  /// first stage's.
  virtual std::vector<std::string> tied_parameters() const { return {}; }
};

/// A model whose forward takes the batch's named tensors and returns named outputs
/// ("logits", ...), as a Hugging Face model's forward(**batch). Any such model steps
/// through the Trainer and every plugin; a pipeline needs a PipelineModule.
class MapModule : public Module {
 public:
  virtual TensorMap forward(const TensorMap& inputs) = 0;
  /// forward with the module's hooks.
  TensorMap operator()(const TensorMap& inputs) {
    return call_forward([&] { return forward(inputs); });
  }
};

/// The stage that is the whole model: every layer, first and last.
StageSpec whole_model(const Module& m);

/// Parameters (elements) of a module, each once (a tied one once).
int64_t parameter_count(const Module& m);
/// Parameters of the modules stage `s` of a PipelineModule runs (its stage_modules; {0, 1,
/// false, false}: layer 0 alone, {0, 0, true, false}: the embeddings), each once.
int64_t stage_parameter_count(const Module& m, const StageSpec& s);

/// The whole model's forward on named tensors, without the module's own hooks (the caller
/// runs it inside call_forward): a PipelineModule's whole stage, a MapModule's forward, or
/// a UnaryModule on inputs["input"] giving {"output"}. Any other module is an error saying
/// which interface to implement.
TensorMap forward_named(Module& m, const TensorMap& inputs);

/// The tensor named `key` of a map; ValueError naming what is there when absent.
const Tensor& need(const TensorMap& m, const std::string& key, const std::string& who);

}  // namespace booster::nn
