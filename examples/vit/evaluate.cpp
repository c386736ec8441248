// Evaluation (see evaluate.h).
#include "evaluate.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"

namespace booster::examples {

namespace {

// Adds a batch's predictions to the confusion matrix ([true][predicted], flat).
void count_predictions(const Tensor& logits, const Tensor& labels, int64_t num_labels, double* confusion) {
  auto lv = logits.to(DType::f32).to_vector();
  auto lab = labels.to_int_vector();
  for (size_t i = 0; i < lab.size(); ++i) {
    int64_t best = 0;
    for (int64_t k = 1; k < num_labels; ++k)
      if (lv[i * size_t(num_labels) + size_t(k)] > lv[i * size_t(num_labels) + size_t(best)]) best = k;
    confusion[size_t(lab[i] * num_labels + best)] += 1;
  }
}

EvalResult summarize(const std::vector<double>& sums, int64_t num_labels) {
  EvalResult r;
  r.samples = int64_t(sums[1] + 0.5);
  r.loss = r.samples ? sums[0] / sums[1] : 0;
  int64_t correct = 0;
  r.confusion.assign(size_t(num_labels), std::vector<int64_t>(size_t(num_labels)));
  for (int64_t i = 0; i < num_labels; ++i) {
    int64_t row = 0;
    for (int64_t k = 0; k < num_labels; ++k) {
      const int64_t c = int64_t(sums[size_t(2 + i * num_labels + k)] + 0.5);
      r.confusion[size_t(i)][size_t(k)] = c;
      row += c;
    }
    correct += r.confusion[size_t(i)][size_t(i)];
    r.per_class_accuracy.push_back(row ? double(r.confusion[size_t(i)][size_t(i)]) / double(row) : 0.0);
  }
  r.accuracy = r.samples ? double(correct) / double(r.samples) : 0;
  return r;
}

}  // namespace

EvalResult evaluate(const BoostedModel<nn::ViTForImageClassification>& model, data::DataLoader& loader, int64_t num_labels,
                    Booster& booster) {
  NoGradGuard ng;
  model->eval();
  // [loss sum, samples, confusion matrix]: what this rank scored, summed over its rows.
  std::vector<double> sums(size_t(2 + num_labels * num_labels), 0.0);
  const StageCriterion ce = on_keys([](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); });
  bool held = true;
  loader.begin_epoch();
  while (auto batch = loader.next()) {
    // One path under every plugin: forward only through execute_pipeline (the whole model
    // as one stage without a pipeline); only the ranks holding outputs have them.
    auto res = booster.execute_pipeline(
        single_batch({{"pixel_values", batch->pixel_values}, {"labels", batch->labels}}), model, ce, nullptr, true, true);
    held = res.loss.defined();
    if (!held) continue;
    const int64_t b = batch->labels.numel();
    sums[0] += res.loss.item() * double(b);
    sums[1] += double(b);
    count_predictions(res.outputs.at("logits"), batch->labels, num_labels, sums.data() + 2);
  }
  model->train();
  return summarize(booster.sum_over_replicas(sums, held), num_labels);
}

}  // namespace booster::examples
