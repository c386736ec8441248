// PipelineModule helpers (see pipeline.h).
#include "nn/pipeline.h"

namespace booster::nn {

StageSpec whole_model(const Module& m) {
  auto* pm = dynamic_cast<const PipelineModule*>(&m);
  return {0, pm ? pm->num_pipeline_layers() : 0, true, true};
}

int64_t parameter_count(const Module& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

int64_t stage_parameter_count(const Module& m, const StageSpec& s) {
  auto* pm = dynamic_cast<const PipelineModule*>(&m);
  BOOSTER_CHECK(pm != nullptr, "stage_parameter_count: a ", m.type_name(), " has no stages (it is not a PipelineModule)");
  const auto paths = pm->stage_modules(s);
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters())
    for (auto& path : paths)
      if (name.compare(0, path.size() + 1, path + ".") == 0) {
        n += p.numel();
        break;
      }
  return n;
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
