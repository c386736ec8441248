// Trainer (see trainer.h).
#include "booster/trainer/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "booster/trainer/progress.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"

namespace booster {

const char* mode_name(Mode m) { return m == Mode::train ? "train" : "test"; }

namespace {

Hooks by_priority(Hooks hooks) {
  for (auto& h : hooks) BOOSTER_CHECK(h != nullptr, "Trainer: a hook is null");
  std::stable_sort(hooks.begin(), hooks.end(), [](auto& a, auto& b) { return a->priority() < b->priority(); });
  return hooks;
}

// Labels that count: those below 0 are padding or ignored (PyTorch's ignore_index); a
// classifier's [B] labels count rows, a language model's [B, T] tokens; soft labels
// (floating, [B, C]) count rows.
int64_t counted_labels(const TensorMap& batch) {
  auto it = batch.find("labels");
  if (it == batch.end() || !it->second.defined() || it->second.dim() == 0) return 0;
  const Tensor& labels = it->second;
  if (!is_index(labels.dtype())) return labels.size(0);
  int64_t n = 0;
  for (int64_t l : labels.to_int_vector()) n += l >= 0;
  return n;
}

bool on_terminal_master() { return (!dist::is_initialized() || dist::world_rank() == 0) && isatty(STDERR_FILENO); }

}  // namespace

// One fit() or evaluate(): the loops over epochs and iterations, calling the hooks.
class TrainerLoop {
 public:
  // A run's metrics are its hooks': the previous run's are dropped (the records stay).
  TrainerLoop(Trainer& t, Hooks hooks) : t_(t), hooks_(by_priority(std::move(hooks))) {
    for (int m = 0; m < 2; ++m) t_.metrics_[m].clear(), t_.step_metrics_[m].clear();
  }

  // Runs body; on an exception every hook hears it, then it leaves.
  template <typename F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      for (auto& h : hooks_) {
        try {
          h->on_exception(t_, e);
        } catch (const std::exception& inner) {
          spdlog::error("Trainer: a hook's on_exception threw '{}' while handling '{}'", inner.what(), e.what());
        }
      }
      throw;
    }
  }

  template <typename F>
  void each(F&& f) {
    for (auto& h : hooks_) f(*h);
  }

  void fit(const FitArgs& a);
  void test_epoch(data::DataLoader& loader, bool display_progress);

 private:
  void plan(const FitArgs& a);
  void train_epoch(data::DataLoader& loader, const FitArgs& a);
  void train_iteration(data::Batch&& batch, int64_t position_after);
  PipelineResult run_step(const TensorMap& in, bool boundary);
  void sync(Mode m) {
    for (auto& [name, metric] : t_.metrics_[int(m)]) metric->sync(t_.booster_);
  }
  TensorMap process(data::Batch&& b, Mode m) {
    return t_.options_.data_process_func ? t_.options_.data_process_func(std::move(b), m) : std::move(b);
  }

  Trainer& t_;
  Hooks hooks_;
};

void TrainerLoop::plan(const FitArgs& a) {
  BOOSTER_CHECK(a.train_dataloader != nullptr, "Trainer.fit: train_dataloader is required");
  BOOSTER_CHECK(t_.optimizer_ != nullptr, "Trainer.fit: training needs an optimizer (the Trainer was built without one)");
  BOOSTER_CHECK(a.epochs >= 0 && a.max_steps >= 0, "Trainer.fit: epochs (", a.epochs, ") and max_steps (", a.max_steps,
                ") must be >= 0");
  BOOSTER_CHECK(a.test_interval >= 1, "Trainer.fit: test_interval must be >= 1, got ", a.test_interval);
  const int64_t k = t_.options_.gradient_accumulation, batches = int64_t(a.train_dataloader->size());
  t_.epochs_ = a.epochs;
  t_.steps_per_epoch_ = batches / k * k;
  BOOSTER_CHECK(t_.steps_per_epoch_ > 0 || a.epochs == 0, "Trainer.fit: the training loader gives ", batches,
                " batch(es) an epoch, fewer than one optimizer step of gradient_accumulation = ", k);
  t_.total_steps_ = a.epochs * t_.steps_per_epoch_;
  t_.layout_ = {t_.dp_size(), a.train_dataloader->options().batch_size, k,
                int64_t(a.train_dataloader->dataset().size()), t_.steps_per_epoch_ / k};
  if (a.max_steps > 0) t_.total_steps_ = std::min(t_.total_steps_, (a.max_steps + k - 1) / k * k);
}

void TrainerLoop::fit(const FitArgs& a) {
  plan(a);
  each([&](BaseHook& h) { h.after_hook_is_attached(t_); });
  t_.model_->train();
  each([&](BaseHook& h) { h.before_train(t_); });
  while (t_.cur_epoch_ < t_.epochs_ && t_.cur_step_ < t_.total_steps_) {
    train_epoch(*a.train_dataloader, a);
    const bool whole = t_.position_ >= t_.steps_per_epoch_;
    if (a.test_dataloader && whole && ((t_.cur_epoch_ + 1) % a.test_interval == 0 || t_.cur_epoch_ + 1 == t_.epochs_))
      test_epoch(*a.test_dataloader, a.display_progress);
    if (!whole) break;  // max_steps stopped it mid-epoch: the progress says where
    ++t_.cur_epoch_;
    t_.position_ = 0;
  }
  each([&](BaseHook& h) { h.after_train(t_); });
}

void TrainerLoop::train_epoch(data::DataLoader& loader, const FitArgs& a) {
  loader.set_epoch(t_.cur_epoch_);
  loader.set_start_batch(size_t(t_.position_));
  loader.begin_epoch();
  t_.model_->train();
  each([&](BaseHook& h) { h.before_train_epoch(t_); });
  ProgressBar bar("epoch " + std::to_string(t_.cur_epoch_ + 1) + "/" + std::to_string(t_.epochs_), t_.steps_per_epoch_,
                  a.display_progress && on_terminal_master(),
                  (!dist::is_initialized() || dist::world_rank() == 0) ? a.log_interval : 0);
  t_.timer_.start("Train-epoch");
  while (t_.position_ < t_.steps_per_epoch_ && t_.cur_step_ < t_.total_steps_) {
    auto batch = loader.next();
    BOOSTER_CHECK(batch.has_value(), "Trainer: the training loader ended after ", t_.position_, " of its ",
                  t_.steps_per_epoch_, " batches");
    train_iteration(std::move(*batch), int64_t(loader.position()));
    bar.update(t_.position_, t_.step_metrics(Mode::train));
  }
  t_.timer_.stop("Train-epoch");
  bar.finish();
  sync(Mode::train);
  each([&](BaseHook& h) { h.after_train_epoch(t_); });
}

void TrainerLoop::train_iteration(data::Batch&& batch, int64_t position_after) {
  each([&](BaseHook& h) { h.before_train_iter(t_); });
  t_.timer_.start("Train-step");
  const int64_t rows = counted_labels(batch);
  const TensorMap in = process(std::move(batch), Mode::train);
  const bool boundary = position_after % t_.options_.gradient_accumulation == 0;
  PipelineResult r = run_step(in, boundary);
  ++t_.cur_step_;
  t_.position_ = position_after;
  t_.stepped_ = boundary;
  t_.timer_.stop("Train-step");
  const IterationOutput out{in, r.outputs, r.loss, rows};
  each([&](BaseHook& h) { h.after_train_iter(t_, out); });
}

PipelineResult TrainerLoop::run_step(const TensorMap& in, bool boundary) {
  const int64_t k = t_.options_.gradient_accumulation;
  StageCriterion criterion = t_.criterion_;
  if (k > 1) criterion = [c = t_.criterion_, k](const TensorMap& o, const TensorMap& b) { return scale(c(o, b), 1.0 / double(k)); };
  PipelineResult r;
  {
    Plugin* plugin = t_.booster_.plugin();
    std::optional<NoSyncScope> accumulate;  // the window's earlier iterations skip the gradient sync
    if (!boundary && plugin && plugin->support_no_sync()) accumulate.emplace(t_.booster_.no_sync(*t_.model_, t_.optimizer_.get()));
    r = t_.booster_.execute_pipeline(single_batch(in), *t_.model_, criterion, t_.optimizer_.get(), true,
                                     t_.options_.return_output_label);
  }
  if (k > 1 && r.loss.defined()) r.loss = scale(r.loss, double(k));  // hooks see the batch's loss
  if (!boundary) return r;
  if (t_.options_.clip_grad_norm > 0) t_.optimizer_->clip_grad_by_norm(t_.options_.clip_grad_norm);
  t_.optimizer_->step();
  t_.optimizer_->zero_grad();
  return r;
}

void TrainerLoop::test_epoch(data::DataLoader& loader, bool display_progress) {
  NoGradGuard no_grad;
  t_.model_->eval();
  each([&](BaseHook& h) { h.before_test(t_); });
  each([&](BaseHook& h) { h.before_test_epoch(t_); });
  loader.begin_epoch();
  ProgressBar bar("test", int64_t(loader.size()), display_progress && on_terminal_master(), 0);
  t_.timer_.start("Test-epoch");
  while (auto batch = loader.next()) {
    each([&](BaseHook& h) { h.before_test_iter(t_); });
    t_.timer_.start("Test-step");
    const int64_t rows = counted_labels(*batch);
    const TensorMap in = process(std::move(*batch), Mode::test);
    PipelineResult r = t_.booster_.execute_pipeline(single_batch(in), *t_.model_, t_.criterion_, nullptr, true, true);
    // The batch's mean over its counted rows (a pipeline's is a mean of micro-batch means).
    if (!r.outputs.empty()) r.loss = t_.criterion_(r.outputs, in).detach();
    t_.timer_.stop("Test-step");
    const IterationOutput out{in, r.outputs, r.loss, rows};
    each([&](BaseHook& h) { h.after_test_iter(t_, out); });
    bar.update(int64_t(loader.position()), t_.step_metrics(Mode::test));
  }
  t_.timer_.stop("Test-epoch");
  bar.finish();
  sync(Mode::test);
  each([&](BaseHook& h) { h.after_test_epoch(t_); });
  each([&](BaseHook& h) { h.after_test(t_); });
  t_.model_->train();
}

Trainer::Trainer(Booster& booster, std::shared_ptr<ModelWrapper> model, std::shared_ptr<OptimizerWrapper> optimizer,
                 StageCriterion criterion, TrainerOptions options)
    : booster_(booster), model_(std::move(model)), optimizer_(std::move(optimizer)), criterion_(std::move(criterion)),
      options_(std::move(options)) {
  BOOSTER_CHECK(model_ != nullptr, "Trainer: the model is required");
  BOOSTER_CHECK(criterion_ != nullptr, "Trainer: the criterion is required");
  BOOSTER_CHECK(options_.gradient_accumulation >= 1, "Trainer: gradient_accumulation must be >= 1, got ",
                options_.gradient_accumulation);
  BOOSTER_CHECK(options_.clip_grad_norm >= 0, "Trainer: clip_grad_norm must be >= 0 (0: no clipping), got ",
                options_.clip_grad_norm);
}

void Trainer::fit(const FitArgs& args) {
  TrainerLoop loop(*this, args.hooks);
  loop.guarded([&] { loop.fit(args); });
}

void Trainer::evaluate(data::DataLoader& test_dataloader, const Hooks& hooks, bool display_progress) {
  TrainerLoop loop(*this, hooks);
  loop.guarded([&] {
    loop.each([&](BaseHook& h) { h.after_hook_is_attached(*this); });
    loop.test_epoch(test_dataloader, display_progress);
  });
}

void Trainer::set_progress(int64_t epoch, int64_t step, int64_t position) {
  BOOSTER_CHECK(epoch >= 0 && step >= 0 && position >= 0, "Trainer: negative progress (epoch ", epoch, ", step ", step,
                ", position ", position, ")");
  BOOSTER_CHECK(position % options_.gradient_accumulation == 0, "Trainer: resuming at batch ", position,
                " of an epoch, inside an accumulation window of ", options_.gradient_accumulation, " batches");
  cur_epoch_ = epoch, cur_step_ = step, position_ = position;
  resumed_ = true;
}

int Trainer::dp_size() const {
  if (booster_.plugin()) return booster_.plugin()->dp_size();
  return dist::is_initialized() ? dist::world_size() : 1;
}

void Trainer::add_metric(Mode mode, const std::string& name, std::shared_ptr<Metric> metric) {
  BOOSTER_CHECK(metric != nullptr, "Trainer.add_metric: metric '", name, "' is null");
  auto& m = metrics_[int(mode)];
  BOOSTER_CHECK(!m.count(name), "Trainer: two hooks add the ", mode_name(mode), " metric '", name, "'");
  m.emplace(name, std::move(metric));
}

const std::map<std::string, std::shared_ptr<Metric>>& Trainer::metrics(Mode mode) const { return metrics_[int(mode)]; }

bool Trainer::has_metric(Mode mode, const std::string& name) const { return metrics_[int(mode)].count(name) > 0; }

Metric& Trainer::metric(Mode mode, const std::string& name) const {
  auto& m = metrics_[int(mode)];
  auto it = m.find(name);
  if (it != m.end()) return *it->second;
  std::string have;
  for (auto& [k, v] : m) have += (have.empty() ? "" : ", ") + k;
  BOOSTER_THROW(ValueError, "Trainer: no ", mode_name(mode), " metric '", name, "' (there are: ",
                have.empty() ? "none" : have, "); add the hook that records it (LossHook, AccuracyHook, ...)");
}

}  // namespace booster
