// Plugin defaults for optional capabilities and the data-parallel DataLoader.
#include "booster/plugin.h"

#include <bit>
#include <map>

#include "booster/grad_sync.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/lazy.h"
#include "data/sampler.h"

namespace booster {

StageCriterion on_keys(Criterion criterion, std::string output_key, std::string label_key) {
  BOOSTER_CHECK(criterion != nullptr, "on_keys: the criterion is empty");
  return [criterion = std::move(criterion), output_key = std::move(output_key), label_key = std::move(label_key)](
             const TensorMap& outputs, const TensorMap& batch) {
    return criterion(nn::need(outputs, output_key, "criterion outputs"), nn::need(batch, label_key, "criterion batch"));
  };
}

StageCriterion model_loss_or(Criterion criterion) {
  StageCriterion on_logits = on_keys(std::move(criterion));
  return [on_logits](const TensorMap& outputs, const TensorMap& batch) {
    const auto loss = outputs.find("loss");
    if (loss != outputs.end() && !outputs.count("logits")) return loss->second;
    return on_logits(outputs, batch);
  };
}

NoSyncScope Plugin::no_sync(ModelWrapper& model, OptimizerWrapper*) {
  BOOSTER_CHECK(support_no_sync(), "plugin '", name(), "' does not support no_sync (support_no_sync() is false)");
  GradSync* sync = model.grad_sync();
  BOOSTER_CHECK(sync != nullptr, name(), ".no_sync: the model has no gradient synchronization (it is a ",
                model.type_name(), "; was it boosted by this plugin, with an optimizer?)");
  BOOSTER_CHECK(!sync->no_sync(), name(), ".no_sync: already inside a no_sync scope");
  sync->set_no_sync(true);
  auto keep = model.shared_from_this();  // the sync lives as long as its model
  return NoSyncScope([sync, keep] { sync->set_no_sync(false); });
}

DataIter single_batch(TensorMap batch) {
  auto left = std::make_shared<std::optional<TensorMap>>(std::move(batch));
  return [left]() {
    std::optional<TensorMap> out;
    std::swap(out, *left);
    return out;
  };
}

namespace {
// Broadcasts the first member's recipes of its lazy tensors among `tensors` (one message);
// returns which are lazy. A tensor lazy on one member and not on another, or built from a
// source (a file each member reads itself) there and from a recipe here, is an error.
std::vector<bool> broadcast_lazy_recipes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                         const dist::ProcessGroup& g) {
  constexpr int64_t kFields = 11;
  std::vector<int64_t> rows(tensors.size() * kFields, 0);
  auto bits = [](double v) { return std::bit_cast<int64_t>(v); };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const LazyRecipe* r = lazy_recipe(tensors[i].second);
    if (!r) continue;
    const Draw& d = r->draw;
    const int64_t row[kFields] = {1 + int64_t(r->kind), bits(r->value), int64_t(d.kind), bits(d.p0), bits(d.p1),
                                  bits(d.p2), bits(d.p3), int64_t(d.at.seed), int64_t(d.at.stream), int64_t(d.at.counter), 0};
    std::copy(row, row + kFields, rows.begin() + int64_t(i) * kFields);
  }
  Tensor msg = Tensor::from_ints(rows, {int64_t(rows.size())});
  dist::broadcast(msg, g.ranks()[0], g);
  const int64_t* first = msg.data<int64_t>();
  std::vector<bool> lazy(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t* row = first + int64_t(i) * kFields;
    LazyRecipe* r = lazy_recipe(tensors[i].second);
    const bool theirs = row[0] != 0;
    BOOSTER_CHECK(theirs == (r != nullptr), "boost: '", tensors[i].first, "' is lazy (nn::LazyInit) on ",
                  theirs ? "the group's first rank but not on rank " : "rank ", dist::world_rank(),
                  theirs ? "" : " but not on the group's first rank", ": build the model the same way on every rank");
    if (!r) continue;
    lazy[i] = true;
    const auto kind = LazyRecipe::Kind(row[0] - 1);
    const bool src = kind == LazyRecipe::Kind::source, mine = r->kind == LazyRecipe::Kind::source;
    BOOSTER_CHECK(src == mine, "boost: lazy '", tensors[i].first, "' reads a source on one rank and is initialized ",
                  "on another: load the same weights on every rank");
    if (src) continue;  // each rank reads the same file
    r->kind = kind;
    r->value = std::bit_cast<double>(row[1]);
    r->draw = Draw{Draw::Kind(row[2]), std::bit_cast<double>(row[3]), std::bit_cast<double>(row[4]),
                   std::bit_cast<double>(row[5]), std::bit_cast<double>(row[6]),
                   GeneratorState{uint64_t(row[7]), uint64_t(row[8]), uint64_t(row[9])}};
  }
  return lazy;
}
}  // namespace

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
  std::vector<std::pair<std::string, Tensor>> sent;
  for (auto& [n, t] : module.state_dict()) {
    if (skip_shards && t.region()) continue;
    if (common_only && holders[n] != g.size()) continue;
    sent.emplace_back(n, t);
  }
  // Lazy tensors (nn::LazyInit) take the first member's recipes, not data: nothing is allocated.
  const std::vector<bool> lazy = broadcast_lazy_recipes(sent, g);
  for (size_t i = 0; i < sent.size(); ++i) {
    if (lazy[i]) continue;
    const Tensor& t = sent[i].second;
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

PipelineResult Plugin::execute_pipeline(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                        OptimizerWrapper* optimizer, bool return_loss, bool return_outputs) {
  return run_as_one_stage(data_iter, model, criterion, optimizer, return_loss, return_outputs);
}

PipelineResult run_as_one_stage(const DataIter& data_iter, ModelWrapper& model, const StageCriterion& criterion,
                                OptimizerWrapper* optimizer, bool return_loss, bool return_outputs) {
  BOOSTER_CHECK(data_iter && criterion, "execute_pipeline: give a data iterator and a criterion (a pipeline step ",
                "runs its batches through the model and applies the criterion on the last stage)");
  std::optional<TensorMap> batch = data_iter();
  BOOSTER_CHECK(batch.has_value(), "execute_pipeline: the data iterator gave no batch");
  model.check_whole_forward();
  TensorMap outputs;
  Tensor loss;
  // A batch whose tensors do not fit the model: the error says which batch it was.
  auto on_batch = [&] { return "execute_pipeline on the batch {" + describe_keys(*batch) + "}: "; };
  try {
    outputs = model.forward_named(*batch);
    loss = criterion(outputs, *batch);
  } catch (const ShapeError& e) {
    throw ShapeError(on_batch() + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(on_batch() + e.what());
  }
  if (autograd::GradMode::enabled()) {  // training; forward only (evaluation) without gradients
    if (optimizer) optimizer->backward(loss);
    else loss.backward();
  }
  PipelineResult out;
  if (return_loss) out.loss = loss.detach();
  if (return_outputs) out.outputs = std::move(outputs);
  return out;
}

}  // namespace booster
