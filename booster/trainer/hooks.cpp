// Built-in hooks (see hooks.h).
#include "booster/trainer/hooks.h"

#include <filesystem>

#include "core/dist/collectives.h"
#include "core/dist/logger.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"

namespace booster {

namespace {

int world_rank() { return dist::is_initialized() ? dist::world_rank() : 0; }

// After every interval-th whole epoch (cur_epoch is the epoch just run, 0-based).
bool epoch_due(const Trainer& t, int64_t interval) { return interval > 0 && (t.cur_epoch() + 1) % interval == 0; }

std::string join_metrics(const Trainer& t, Mode mode) {
  std::string s;
  for (auto& [name, m] : t.metrics(mode))
    s += fmt::format("{}{} = {:.4g}", s.empty() ? "" : " | ", name, m->accumulated_value());
  return s;
}

}  // namespace

// ---- LossHook ----
void LossHook::after_hook_is_attached(Trainer& t) {
  auto make = [this](bool epoch_only) -> std::shared_ptr<LossMetric> {
    if (exp_) return std::make_shared<PerplexityMetric>(epoch_only);
    return std::make_shared<LossMetric>(epoch_only);
  };
  train_ = make(false);
  test_ = make(true);
  t.add_metric(Mode::train, name_, train_);
  t.add_metric(Mode::test, name_, test_);
}
void LossHook::before_train_epoch(Trainer&) { train_->reset(); }
void LossHook::after_train_iter(Trainer& t, const IterationOutput& out) { train_->update(out.loss, out.rows, t.booster()); }
void LossHook::before_test_epoch(Trainer&) { test_->reset(); }
void LossHook::after_test_iter(Trainer& t, const IterationOutput& out) { test_->update(out.loss, out.rows, t.booster()); }

// ---- AccuracyHook ----
AccuracyHook::AccuracyHook(AccuracyMetric::AccuracyFunc accuracy_func, int priority, int64_t num_classes,
                           std::string output_key, std::string label_key)
    : BaseHook(priority), func_(std::move(accuracy_func)), classes_(num_classes), output_key_(std::move(output_key)),
      label_key_(std::move(label_key)) {}

void AccuracyHook::after_hook_is_attached(Trainer& t) {
  metric_ = std::make_shared<AccuracyMetric>(true, func_, classes_);
  t.add_metric(Mode::test, "Accuracy", metric_);
}
void AccuracyHook::before_test(Trainer&) { metric_->reset(); }
void AccuracyHook::after_test_iter(Trainer&, const IterationOutput& out) {
  if (out.outputs.empty()) return;  // a stage without outputs
  auto o = out.outputs.find(output_key_);
  auto l = out.batch.find(label_key_);
  BOOSTER_CHECK(o != out.outputs.end() && l != out.batch.end(), "AccuracyHook: the test step has no output '",
                output_key_, "' or no batch entry '", label_key_, "'");
  metric_->update(o->second, l->second);
}

// ---- LRSchedulerHook ----
LRSchedulerHook::LRSchedulerHook(std::shared_ptr<optim::LRScheduler> lr_scheduler, bool by_epoch, bool store_lr_in_state,
                                 int priority)
    : BaseHook(priority), scheduler_(std::move(lr_scheduler)), by_epoch_(by_epoch), store_(store_lr_in_state) {
  BOOSTER_CHECK(scheduler_ != nullptr, "LRSchedulerHook: the lr_scheduler is null");
}
double LRSchedulerHook::lr() const { return scheduler_->get_last_lr().empty() ? 0.0 : scheduler_->get_last_lr()[0]; }
void LRSchedulerHook::after_hook_is_attached(Trainer& t) {
  metric_ = std::make_shared<LearningRateMetric>(false, lr());
  if (store_) t.add_metric(Mode::train, "LR", metric_);
}
void LRSchedulerHook::after_train_iter(Trainer& t, const IterationOutput&) {
  if (!by_epoch_ && t.stepped()) scheduler_->step();
  metric_->update(lr());
}
void LRSchedulerHook::after_train_epoch(Trainer& t) {
  if (by_epoch_ && t.position() >= t.steps_per_epoch()) scheduler_->step();  // a whole epoch only
  metric_->update(lr());
}

// ---- ThroughputHook ----
void ThroughputHook::after_hook_is_attached(Trainer& t) {
  train_ = std::make_shared<ThroughputMetric>(false, ignored_, tflop_);
  test_ = std::make_shared<ThroughputMetric>(true, ignored_, tflop_);
  t.add_metric(Mode::train, "Throughput", train_);
  t.add_metric(Mode::test, "Throughput", test_);
}
void ThroughputHook::before_train_epoch(Trainer&) { train_->reset(); }
void ThroughputHook::after_train_iter(Trainer& t, const IterationOutput& out) {
  train_->update(out.rows * (local_ ? 1 : t.dp_size()), t.timer().last("Train-step"));
}
void ThroughputHook::before_test(Trainer&) { test_->reset(); }
void ThroughputHook::after_test_iter(Trainer& t, const IterationOutput& out) {
  test_->update(out.rows * (local_ ? 1 : t.dp_size()), t.timer().last("Test-step"));
}

// ---- LogMetricByStepHook ----
namespace {
void copy_step_metrics(Trainer& t, Mode mode) {
  auto& shown = t.step_metrics(mode);
  for (auto& [name, m] : t.metrics(mode))
    if (!m->epoch_only()) shown[name] = m->last_step_value();
}
}  // namespace
void LogMetricByStepHook::after_train_iter(Trainer& t, const IterationOutput&) { copy_step_metrics(t, Mode::train); }
void LogMetricByStepHook::after_test_iter(Trainer& t, const IterationOutput&) { copy_step_metrics(t, Mode::test); }

// ---- LogMetricByEpochHook ----
void LogMetricByEpochHook::after_train_epoch(Trainer& t) {
  if (epoch_due(t, interval_)) dist::logger().info("[Epoch {} / Train]: {}", t.cur_epoch() + 1, join_metrics(t, Mode::train));
}
void LogMetricByEpochHook::after_test_epoch(Trainer& t) {
  if (epoch_due(t, interval_)) dist::logger().info("[Epoch {} / Test]: {}", t.cur_epoch() + 1, join_metrics(t, Mode::test));
}

// ---- TensorboardHook ----
TensorboardHook::TensorboardHook(std::string log_dir, std::vector<int> ranks, int priority) : BaseHook(priority) {
  if (std::find(ranks.begin(), ranks.end(), world_rank()) == ranks.end()) return;
  writer_ = std::make_unique<SummaryWriter>((std::filesystem::path(log_dir) / ("rank_" + std::to_string(world_rank()))).string());
}
void TensorboardHook::write(Trainer& t, Mode mode, bool epoch_only) {
  if (!writer_) return;
  for (auto& [name, m] : t.metrics(mode)) {
    if (m->epoch_only() != epoch_only) continue;
    const double v = epoch_only ? m->accumulated_value() : m->last_step_value();
    if (v == v) writer_->add_scalar(name + "/" + mode_name(mode), v, t.cur_step());  // NaN: nothing recorded yet
  }
  writer_->flush();
}
void TensorboardHook::after_train_iter(Trainer& t, const IterationOutput&) { write(t, Mode::train, false); }
void TensorboardHook::after_train_epoch(Trainer& t) { write(t, Mode::train, true); }
void TensorboardHook::after_test_iter(Trainer& t, const IterationOutput&) { write(t, Mode::test, false); }
void TensorboardHook::after_test_epoch(Trainer& t) { write(t, Mode::test, true); }
void TensorboardHook::on_exception(Trainer&, const std::exception&) {
  if (writer_) writer_->flush();
}

// ---- LogTimingByEpochHook ----
void LogTimingByEpochHook::log(Trainer& t, Mode mode) {
  const std::string prefix = mode == Mode::train ? "Train-" : "Test-";
  std::string s;
  for (const std::string& name : t.timer().names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t skip = name == "Train-step" ? size_t(ignore_) : 0;
    s += fmt::format("{}{}: last {:.4f} s, mean {:.4f} s", s.empty() ? "" : " | ", name, t.timer().last(name),
                     t.timer().mean(name, skip));
  }
  dist::logger().info("[Epoch {} / {}] timing: {}", t.cur_epoch() + 1, mode == Mode::train ? "Train" : "Test", s);
}
void LogTimingByEpochHook::after_train_epoch(Trainer& t) {
  if (epoch_due(t, interval_)) log(t, Mode::train);
}
void LogTimingByEpochHook::after_test_epoch(Trainer& t) {
  if (log_eval_ && epoch_due(t, interval_)) log(t, Mode::test);
}

// ---- LogMemoryByEpochHook ----
void LogMemoryByEpochHook::report(const std::string& when) {
  const auto names = memory_tier_names();
  constexpr float kMB = 1048576.0f;
  std::vector<float> mine;  // MB per tier: in use, peak; then the resident set
  for (auto& n : names) mine.push_back(float(memory_tier(n).bytes_in_use()) / kMB), mine.push_back(float(memory_tier(n).peak_bytes()) / kMB);
  mine.push_back(float(resident_set_bytes()) / kMB);
  Tensor t = Tensor::from_vector(mine, {int64_t(mine.size())});
  if (dist::is_initialized() && dist::world_size() > 1) dist::all_reduce(t, dist::ReduceOp::max);
  const auto v = t.to_vector();
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += fmt::format("{}{}: {:.1f} MB in use, peak {:.1f} MB", s.empty() ? "" : " | ", names[i], v[2 * i], v[2 * i + 1]);
  if (cpu_) s += fmt::format(" | resident set {:.1f} MB", v.back());
  dist::logger().info("memory {} (largest rank): {}", when, s);
  for (auto& n : names) memory_tier(n).reset_peak();
}
void LogMemoryByEpochHook::before_train(Trainer&) { report("before training"); }
void LogMemoryByEpochHook::after_train_epoch(Trainer& t) {
  if (epoch_due(t, interval_)) report("after epoch " + std::to_string(t.cur_epoch() + 1));
}
void LogMemoryByEpochHook::after_test(Trainer&) {
  if (log_eval_) report("after the test");
}

}  // namespace booster
