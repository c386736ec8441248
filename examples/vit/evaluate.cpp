// Evaluation (see evaluate.h).
#include "evaluate.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"

namespace booster::examples {

EvalResult evaluate(const BoostedModel<nn::ViTForImageClassification>& model, data::DataLoader& loader, int64_t num_labels,
                    int dp, Booster* pipeline) {
  NoGradGuard ng;
  model->eval();
  std::vector<int64_t> confusion(size_t(num_labels * num_labels), 0);
  double loss_sum = 0;
  int64_t n = 0;
  const StageCriterion ce = on_keys([](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); });
  loader.begin_epoch();
  while (auto batch = loader.next()) {
    Tensor logits, loss;
    if (pipeline) {  // forward only through the stages; the last one has the outputs
      auto res = pipeline->execute_pipeline(
          single_batch({{"pixel_values", batch->pixel_values}, {"labels", batch->labels}}), model, ce, nullptr, true, true);
      if (!res.loss.defined()) continue;
      logits = res.outputs.at("logits"), loss = res.loss;
    } else {
      auto out = model(batch->pixel_values, batch->labels);
      logits = out.logits, loss = out.loss;
    }
    const int64_t b = batch->labels.numel();
    loss_sum += loss.item() * double(b);
    auto lv = logits.to(DType::f32).to_vector();
    auto labels = batch->labels.to_int_vector();
    for (int64_t i = 0; i < b; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < num_labels; ++k)
        if (lv[size_t(i * num_labels + k)] > lv[size_t(i * num_labels + best)]) best = k;
      ++confusion[size_t(labels[size_t(i)] * num_labels + best)];
    }
    n += b;
  }
  model->train();
  // Every image was scored by the same number of ranks of its replica (a tensor-parallel
  // group's, a pipeline's last stage's): the ranks that scored, over the replicas.
  int copies = 1;
  if (dist::is_initialized() && dist::world_size() > 1)
    copies = int(dist::all_reduce_scalar(n > 0 || !pipeline ? 1.0 : 0.0, dist::ReduceOp::sum)) / std::max(dp, 1);
  copies = std::max(copies, 1);
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
