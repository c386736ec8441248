// What boost() hands a plugin and returns (the five objects), and the step's vocabulary:
// criteria on tensors or on named tensors, a pipeline step's data iterator and result.
// The engines below the plugins (zero/, pipeline/) speak it without knowing Plugin.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "booster/model_wrapper.h"
#include "booster/optimizer_wrapper.h"
#include "data/dataloader.h"
#include "optim/lr_scheduler.h"

namespace booster {

/// loss = criterion(logits, labels): the training loop's criterion.
using Criterion = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;
/// loss = criterion(outputs, micro_batch): a pipeline's criterion (Colossal-AI's
/// criterion(outputs, inputs)), on the last stage's outputs and the micro-batch's tensors.
using StageCriterion = std::function<Tensor(const TensorMap& outputs, const TensorMap& batch)>;
/// A StageCriterion applying `criterion` to outputs[output_key] and batch[label_key].
StageCriterion on_keys(Criterion criterion, std::string output_key = "logits", std::string label_key = "labels");
/// Colossal-AI's `lambda outputs, inputs: outputs.loss` where the model computed its own loss
/// (outputs "loss" without "logits": a causal LM with fused_linear_cross_entropy), else
/// `criterion` on outputs["logits"] and batch["labels"], as on_keys.
StageCriterion model_loss_or(Criterion criterion);

/// The five objects boost() hands to configure() and returns.
struct BoostedObjects {
  std::shared_ptr<ModelWrapper> model;
  std::shared_ptr<OptimizerWrapper> optimizer;
  Criterion criterion;
  std::shared_ptr<data::DataLoader> dataloader;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
};

/// Result of execute_pipeline (set on the last stage, empty elsewhere).
struct PipelineResult {
  Tensor loss;
  TensorMap outputs;
};

/// Pulls the next batch of a pipeline step (nullopt: the data ran out).
using DataIter = std::function<std::optional<TensorMap>()>;
/// A DataIter giving `batch` once (Python's iter([batch])).
DataIter single_batch(TensorMap batch);

}  // namespace booster
