// Evaluation over a (data-parallel) loader: loss, accuracy, per-class accuracy and the
// confusion matrix, summed over ranks (counts are all-reduced; the loss is not multiplied
// by the data-parallel size, which Colossal-AI's example does by mistake).
#pragma once

#include <vector>

#include "booster/booster.h"
#include "data/dataloader.h"
#include "nn/vit.h"

namespace booster::examples {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<double> per_class_accuracy;
};

/// Runs the model over every batch of the loader without gradients, through
/// booster.execute_pipeline under every plugin (forward only), and sums over the replicas
/// with booster.sum_over_replicas: each image counted once under any dp / tp / pp layout.
EvalResult evaluate(const BoostedModel<nn::ViTForImageClassification>& model, data::DataLoader& loader, int64_t num_labels,
                    Booster& booster);

}  // namespace booster::examples
