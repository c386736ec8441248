// PipelineModule helpers (see pipeline.h).
#include "nn/pipeline.h"

namespace booster::nn {

StageSpec whole_model(const Module& m) {
  auto* pm = dynamic_cast<const PipelineModule*>(&m);
  return {0, pm ? pm->num_pipeline_layers() : 0, true, true};
}

TensorMap forward_named(Module& m, const TensorMap& inputs) {
  if (auto* pm = dynamic_cast<PipelineModule*>(&m)) return pm->stage_forward(inputs, whole_model(m));
  if (auto* mm = dynamic_cast<MapModule*>(&m)) return mm->forward(inputs);
  if (auto* um = dynamic_cast<UnaryModule*>(&m)) return {{"output", um->forward(need(inputs, "input", m.type_name()))}};
  BOOSTER_THROW(ValueError, "a ", m.type_name(), " cannot run on named tensors: implement nn::MapModule (forward on a ",
                "TensorMap, as a Hugging Face model's forward(**batch)), nn::PipelineModule, or nn::UnaryModule (reads ",
                "\"input\", returns \"output\")");
}

const Tensor& need(const TensorMap& m, const std::string& key, const std::string& who) {
  auto it = m.find(key);
  if (it != m.end() && it->second.defined()) return it->second;
  BOOSTER_THROW(ValueError, who, ": needs the tensor '", key, "', got {", describe_keys(m), "}");
}

}  // namespace booster::nn
