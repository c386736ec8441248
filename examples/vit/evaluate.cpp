// Evaluation (see evaluate.h).
#include "evaluate.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace booster::examples {

EvalResult evaluate(const BoostedModel<nn::ViTForImageClassification>& model, data::DataLoader& loader, int64_t num_labels,
                    int copies) {
  NoGradGuard ng;
  model->eval();
  std::vector<int64_t> confusion(size_t(num_labels * num_labels), 0);
  double loss_sum = 0;
  int64_t n = 0;
  loader.begin_epoch();
  while (auto batch = loader.next()) {
    auto out = model(batch->pixel_values, batch->labels);
    const int64_t b = batch->labels.numel();
    loss_sum += out.loss.item() * double(b);
    auto logits = out.logits.to_vector();
    auto labels = batch->labels.to_int_vector();
    for (int64_t i = 0; i < b; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < num_labels; ++k)
        if (logits[size_t(i * num_labels + k)] > logits[size_t(i * num_labels + best)]) best = k;
      ++confusion[size_t(labels[size_t(i)] * num_labels + best)];
    }
    n += b;
  }
  model->train();
  Tensor counts = Tensor::from_ints(confusion, {num_labels * num_labels});
  Tensor totals = Tensor::from_vector({float(loss_sum), float(n)}, {2});
  if (dist::is_initialized() && dist::world_size() > 1) {
    dist::all_reduce(counts);
    dist::all_reduce(totals);
  }
  EvalResult r;
  auto c = counts.to_int_vector();
  auto t = totals.to_vector();
  for (auto& x : c) x /= copies;  // every image was scored by `copies` ranks
  for (auto& x : t) x /= float(copies);
  r.samples = int64_t(t[1]);
  r.loss = r.samples ? double(t[0]) / double(t[1]) : 0;
  int64_t correct = 0;
  r.confusion.assign(size_t(num_labels), std::vector<int64_t>(size_t(num_labels)));
  for (int64_t i = 0; i < num_labels; ++i) {
    int64_t row = 0;
    for (int64_t k = 0; k < num_labels; ++k) {
      r.confusion[size_t(i)][size_t(k)] = c[size_t(i * num_labels + k)];
      row += c[size_t(i * num_labels + k)];
    }
    correct += c[size_t(i * num_labels + i)];
    r.per_class_accuracy.push_back(row ? double(c[size_t(i * num_labels + i)]) / double(row) : 0.0);
  }
  r.accuracy = r.samples ? double(correct) / double(r.samples) : 0;
  return r;
}

}  // namespace booster::examples
