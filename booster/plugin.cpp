// Plugin defaults for optional capabilities and the data-parallel DataLoader.
#include "booster/plugin.h"

#include <map>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "data/sampler.h"

namespace booster {

StageCriterion on_keys(Criterion criterion, std::string output_key, std::string label_key) {
  BOOSTER_CHECK(criterion != nullptr, "on_keys: the criterion is empty");
  return [criterion = std::move(criterion), output_key = std::move(output_key), label_key = std::move(label_key)](
             const TensorMap& outputs, const TensorMap& batch) {
    return criterion(nn::need(outputs, output_key, "criterion outputs"), nn::need(batch, label_key, "criterion batch"));
  };
}

NoSyncScope Plugin::no_sync(ModelWrapper&, OptimizerWrapper*) {
  BOOSTER_THROW(ValueError, "plugin '", name(), "' does not support no_sync (support_no_sync() is false)");
}

DataIter single_batch(TensorMap batch) {
  auto left = std::make_shared<std::optional<TensorMap>>(std::move(batch));
  return [left]() {
    std::optional<TensorMap> out;
    std::swap(out, *left);
    return out;
  };
}

void broadcast_module_state(const nn::Module& module, const dist::ProcessGroup& g, bool skip_shards, bool common_only) {
  if (g.size() == 1) return;
  NoGradGuard ng;
  std::map<std::string, int> holders;  // common_only: how many members hold each tensor
  if (common_only) {
    std::string mine;
    for (auto& [n, t] : module.state_dict()) mine += n + "\n";
    for (const std::string& names : dist::all_gather_bytes(mine, g)) {
      size_t a = 0;
      for (size_t b; (b = names.find('\n', a)) != std::string::npos; a = b + 1) ++holders[names.substr(a, b - a)];
    }
  }
  for (auto& [n, t] : module.state_dict()) {
    if (skip_shards && t.region()) continue;
    if (common_only && holders[n] != g.size()) continue;
    Tensor x = t.is_contiguous() ? t : t.contiguous();
    dist::broadcast(x, g.ranks()[0], g);
    if (!x.is_same(t)) Tensor(t).copy_(x);
  }
}

std::pair<int, int> Plugin::dp_rank_size() const {
  return {dist::is_initialized() ? dist::world_rank() : 0, dist::is_initialized() ? dist::world_size() : 1};
}

std::shared_ptr<data::DataLoader> Plugin::prepare_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                                             const data::DataLoaderOptions& o) {
  BOOSTER_CHECK(dataset != nullptr, "prepare_dataloader: the dataset is null");
  const auto [rank, size] = dp_rank_size();
  auto sampler = std::make_shared<data::DistributedSampler>(dataset->size(), size, rank, o.shuffle, o.seed, o.drop_last);
  return std::make_shared<data::DataLoader>(std::move(dataset), o, sampler);
}

PipelineResult Plugin::execute_pipeline(const DataIter&, ModelWrapper&, const StageCriterion&, OptimizerWrapper*, bool,
                                        bool) {
  BOOSTER_THROW(ValueError, "plugin '", name(),
                "' has no pipeline parallelism (support_pipeline() is false); call the model, booster.backward and "
                "optimizer.step instead of execute_pipeline");
}

}  // namespace booster
