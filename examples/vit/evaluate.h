// Evaluation over a (data-parallel) loader: loss, accuracy, per-class accuracy and the
// confusion matrix, summed over ranks (counts are all-reduced; the loss is not multiplied
// by the data-parallel size, which Colossal-AI's example does by mistake).
#pragma once

#include <vector>

#include "booster/model_wrapper.h"
#include "data/dataloader.h"
#include "nn/vit.h"

namespace booster::examples {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<double> per_class_accuracy;
};

/// Runs the model over every batch of the loader without gradients.
/// copies: how many ranks score each image (a tensor-parallel replica's ranks score the
/// same ones); their all-reduced counts are divided by it.
EvalResult evaluate(const BoostedModel<nn::ViTForImageClassification>& model, data::DataLoader& loader, int64_t num_labels,
                    int copies = 1);

}  // namespace booster::examples
