// Trainer metrics (see metrics.h).
#include "booster/trainer/metrics.h"

namespace booster {

namespace {

// Argmax predictions of [N, C] logits.
std::vector<int64_t> predictions(const Tensor& logits) {
  BOOSTER_CHECK(logits.dim() == 2, "AccuracyMetric: logits must be [rows, classes], got ", shape_str(logits.shape()));
  const auto v = logits.to(DType::f32).to_vector();
  const size_t n = size_t(logits.size(0)), c = size_t(logits.size(1));
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    size_t best = 0;
    for (size_t k = 1; k < c; ++k)
      if (v[i * c + k] > v[i * c + best]) best = k;
    out[i] = int64_t(best);
  }
  return out;
}

}  // namespace

void LossMetric::reset() {
  step_sum_ = local_sum_ = 0;
  steps_ = local_rows_ = samples_ = 0;
  value_ = kNoValue;
  held_ = false;
}

void LossMetric::update(const Tensor& loss, int64_t rows, const Booster& booster) {
  if (!epoch_only()) {
    last_ = booster.mean_loss(loss);
    step_sum_ += last_;
    ++steps_;
    return;
  }
  if (!loss.defined()) return;
  held_ = true;
  if (rows == 0) return;  // a batch of padding only: its mean is 0/0
  local_sum_ += loss.item() * double(rows);
  local_rows_ += rows;
  last_ = loss.item();
}

void LossMetric::sync(const Booster& booster) {
  if (!epoch_only()) return;
  const auto s = booster.sum_over_replicas({local_sum_, double(local_rows_)}, held_);
  samples_ = int64_t(s[1] + 0.5);
  value_ = samples_ ? s[0] / s[1] : kNoValue;
}

double LossMetric::accumulated_value() const {
  if (epoch_only()) return value_;
  return steps_ ? step_sum_ / double(steps_) : kNoValue;
}

AccuracyMetric::AccuracyMetric(bool epoch_only, AccuracyFunc accuracy_func, int64_t num_classes)
    : Metric(epoch_only), func_(std::move(accuracy_func)), classes_(num_classes) {
  BOOSTER_CHECK(num_classes >= 0, "AccuracyMetric: num_classes must be >= 0, got ", num_classes);
  BOOSTER_CHECK(!func_ || classes_ == 0, "AccuracyMetric: a confusion matrix (num_classes) needs the default argmax "
                                         "accuracy, not an accuracy_func");
  reset();
}

void AccuracyMetric::reset() {
  local_.assign(size_t(2 + classes_ * classes_), 0.0);
  confusion_.clear();
  correct_ = total_ = 0;
  held_ = false;
}

void AccuracyMetric::update(const Tensor& logits, const Tensor& labels) {
  if (!logits.defined()) return;
  held_ = true;
  int64_t correct = 0, total = 0;
  const auto lab = labels.to_int_vector();
  if (func_) {
    correct = func_(logits, labels);
    for (int64_t l : lab) total += l >= 0;
  } else {
    const auto pred = predictions(logits);
    BOOSTER_CHECK(pred.size() == lab.size(), "AccuracyMetric: ", pred.size(), " rows of logits for ", lab.size(),
                  " labels");
    for (size_t i = 0; i < lab.size(); ++i) {
      if (lab[i] < 0) continue;  // padding or an ignored row
      BOOSTER_CHECK(classes_ == 0 || lab[i] < classes_, "AccuracyMetric: label ", lab[i], " of row ", i, " is not below ",
                    "num_classes = ", classes_);
      ++total;
      correct += pred[i] == lab[i];
      if (classes_) local_[size_t(2 + lab[i] * classes_ + pred[i])] += 1;
    }
  }
  local_[0] += double(correct);
  local_[1] += double(total);
  last_ = total ? double(correct) / double(total) : last_;
}

void AccuracyMetric::sync(const Booster& booster) {
  const auto s = booster.sum_over_replicas(local_, held_);
  correct_ = int64_t(s[0] + 0.5), total_ = int64_t(s[1] + 0.5);
  confusion_.assign(size_t(classes_), std::vector<int64_t>(size_t(classes_)));
  for (int64_t i = 0; i < classes_; ++i)
    for (int64_t k = 0; k < classes_; ++k) confusion_[size_t(i)][size_t(k)] = int64_t(s[size_t(2 + i * classes_ + k)] + 0.5);
}

double AccuracyMetric::accumulated_value() const { return total_ ? double(correct_) / double(total_) : kNoValue; }

std::vector<double> AccuracyMetric::per_class_accuracy() const {
  std::vector<double> out;
  for (size_t i = 0; i < confusion_.size(); ++i) {
    int64_t row = 0;
    for (int64_t c : confusion_[i]) row += c;
    out.push_back(row ? double(confusion_[i][i]) / double(row) : 0.0);
  }
  return out;
}

void ThroughputMetric::reset() {
  steps_ = counted_ = 0;
  rows_ = seconds_ = 0;
}

void ThroughputMetric::update(int64_t global_rows, double seconds) {
  last_ = seconds > 0 ? double(global_rows) / seconds : kNoValue;
  if (steps_++ < ignored_) return;
  ++counted_;
  rows_ += double(global_rows);
  seconds_ += seconds;
}

double ThroughputMetric::accumulated_value() const { return seconds_ > 0 ? rows_ / seconds_ : kNoValue; }

double ThroughputMetric::tflops() const { return seconds_ > 0 ? tflop_ * double(counted_) / seconds_ : 0.0; }

}  // namespace booster
