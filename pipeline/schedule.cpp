// Pipeline schedules (see schedule.h).
#include "pipeline/schedule.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "booster/grad_sync.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/weight_grad_store.h"
#include "core/common/check.h"
#include "core/common/profiler.h"
#include "core/dist/collectives.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "core/tensor/allocator.h"

namespace booster::pipeline {

std::vector<int64_t> microbatch_sizes(int64_t batch, const ScheduleOptions& o, bool training) {
  BOOSTER_CHECK(o.num_microbatches > 0 || o.microbatch_size > 0,
                "pipeline schedule: set num_microbatches or microbatch_size");
  BOOSTER_CHECK(batch > 0, "pipeline schedule: the batch is empty");
  int64_t mbs = o.microbatch_size;
  if (o.num_microbatches > 0 && o.microbatch_size > 0) {  // both, as Colossal-AI takes them: they must agree
    BOOSTER_CHECK(!training || batch == o.num_microbatches * o.microbatch_size, "pipeline schedule: num_microbatches ",
                  o.num_microbatches, " x microbatch_size ", o.microbatch_size, " = ",
                  o.num_microbatches * o.microbatch_size, " rows, but the batch has ", batch,
                  " (set one of them, or both so that they agree)");
  } else if (o.num_microbatches > 0) {
    if (training)
      BOOSTER_CHECK(batch % o.num_microbatches == 0, "pipeline schedule: the batch size ", batch,
                    " is not divisible by num_microbatches ", o.num_microbatches);
    mbs = (batch + o.num_microbatches - 1) / o.num_microbatches;
  } else if (training) {
    BOOSTER_CHECK(batch % mbs == 0, "pipeline schedule: the batch size ", batch, " is not divisible by microbatch_size ",
                  mbs);
  }
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < batch; off += mbs) sizes.push_back(std::min(mbs, batch - off));
  for (int64_t s : sizes)
    BOOSTER_CHECK_T(ShapeError, s % o.rows_multiple == 0, o.rows_owner, ": a batch of ", s,
                    " rows does not divide into its ", o.rows_multiple, " row blocks (a micro-batch of the pipeline: ",
                    "every micro-batch must be a multiple of ", o.rows_multiple, ")");
  return sizes;
}

PipelineSchedule::PipelineSchedule(const PipelineStageManager& stages, ScheduleOptions opts)
    : sm_(stages), opts_(opts), p2p_(stages, opts.enable_metadata_cache) {
  const bool ends = sm_.is_first_stage() || sm_.is_last_stage();
  tied_ = dist::split_group(sm_.group(), ends ? 0 : 1, sm_.stage(), ends ? "pipeline ends" : "pipeline middle");
}

void PipelineSchedule::sum_tied_gradients(ModelWrapper& model) {
  if (sm_.num_stages() == 1 || !(sm_.is_first_stage() || sm_.is_last_stage())) return;
  // While no_sync keeps full gradients accumulating on each stage, the step that synchronizes sums them all.
  if (const GradSync* sync = model.grad_sync(); sync && !sync->reduces_now()) return;
  auto module = model.module();
  auto* pm = dynamic_cast<nn::PipelineModule*>(module.get());
  if (!pm) return;
  NoGradGuard ng;
  for (const std::string& name : pm->tied_parameters()) {
    Tensor p = module->get_tensor(name);
    BOOSTER_CHECK(p.defined(), "pipeline: the tied parameter '", name, "' is not held by stage ", sm_.stage());
    Tensor g = p.grad();
    if (!g.defined()) {  // no gradient reached it on this stage (a frozen head): counts as zero
      g = Tensor::zeros(p.shape(), p.dtype());
      p.set_grad(g);
    }
    dist::all_reduce(g, dist::ReduceOp::sum, *tied_);
  }
}

void PipelineSchedule::check_microbatches(int64_t m) const {
  BOOSTER_CHECK(m >= sm_.num_stages(), "pipeline schedule: ", m, " micro-batches (num_microbatches / microbatch_size) "
                "cannot fill ", sm_.num_stages(), " stages (pp_size); at least pp_size are needed");
}

void InterleavedSchedule::check_microbatches(int64_t m) const {
  PipelineSchedule::check_microbatches(m);
  BOOSTER_CHECK(m % sm_.num_stages() == 0, "interleaved pipeline schedule: ", m,
                " micro-batches (num_microbatches) must be a multiple of pp_size ", sm_.num_stages());
}

std::vector<PipelineSchedule::Op> OneForwardOneBackwardSchedule::order(int64_t m, bool forward_only) const {
  std::vector<Op> ops;
  if (forward_only) {
    for (int64_t i = 0; i < m; ++i) ops.push_back({true, 0, i});
    return ops;
  }
  const int64_t warmup = std::min<int64_t>(sm_.num_stages() - sm_.stage() - 1, m), steady = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) ops.push_back({true, 0, i});
  for (int64_t i = 0; i < steady; ++i) {
    ops.push_back({true, 0, warmup + i});
    ops.push_back({false, 0, i});
  }
  for (int64_t i = steady; i < m; ++i) ops.push_back({false, 0, i});
  return ops;
}

std::vector<PipelineSchedule::Op> GPipeSchedule::order(int64_t m, bool forward_only) const {
  std::vector<Op> ops;
  for (int64_t i = 0; i < m; ++i) ops.push_back({true, 0, i});
  if (!forward_only)
    for (int64_t i = 0; i < m; ++i) ops.push_back({false, 0, i});
  return ops;
}

std::vector<PipelineSchedule::Op> InterleavedSchedule::order(int64_t m, bool forward_only) const {
  const int64_t S = sm_.num_stages(), C = sm_.num_model_chunks(), group = S * C, total = m * C;
  // Virtual micro-batch k: model chunk and micro-batch (Megatron's and Colossal-AI's order).
  auto chunk_of = [&](int64_t k, bool forward) {
    const int64_t c = (k % group) / S;
    return int(forward ? c : C - 1 - c);
  };
  auto mb_of = [&](int64_t k) { return (k / group) * S + k % S; };
  std::vector<Op> ops;
  if (forward_only) {
    // Forward only: all micro-batches of a round of S through each chunk in turn; a ragged
    // number of micro-batches runs its last round short.
    for (int64_t base = 0; base < m; base += S)
      for (int c = 0; c < C; ++c)
        for (int64_t i = base; i < std::min(m, base + S); ++i) ops.push_back({true, c, i});
    return ops;
  }
  const int64_t warmup = std::min(total, 2 * (S - sm_.stage() - 1) + (C - 1) * S), steady = total - warmup;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back({true, chunk_of(k, true), mb_of(k)});
  for (int64_t i = 0; i < steady; ++i) {
    const int64_t k = warmup + i;
    ops.push_back({true, chunk_of(k, true), mb_of(k)});
    ops.push_back({false, chunk_of(i, false), mb_of(i)});
  }
  for (int64_t i = steady; i < total; ++i) ops.push_back({false, chunk_of(i, false), mb_of(i)});
  return ops;
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The tied parameters two model chunks of this stage use (the V's first and last chunk,
// both on stage 0). Their contributions would reach one .grad in whatever order the schedule
// interleaved the chunks' passes, an order measured costs decide; here each chunk's B and W
// passes accumulate into a gradient of the chunk's own (each chunk's passes run in
// micro-batch order), and the two are summed in chunk order after the step, so the sum is
// the same whatever the order (LazyInitEqualsEager: two runs, two measured orders).
class ChunkGradients {
 public:
  void hold(std::vector<Tensor> params) {
    params_ = std::move(params);
    spare_.assign(params_.size(), Tensor());
  }
  /// Chunk c's passes accumulate into its own gradients from here.
  void enter(int c) {
    if (params_.empty() || c == current_) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor other = spare_[i];
      spare_[i] = params_[i].grad();
      params_[i].set_grad(other);
    }
    current_ = c;
  }
  /// .grad = chunk 0's + chunk 1's (what .grad held before the step went on with chunk 0's).
  void merge() {
    enter(0);
    NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!spare_[i].defined()) continue;
      Tensor g = params_[i].grad();
      if (!g.defined()) params_[i].set_grad(spare_[i]);
      else kernels::add_(g, spare_[i]);
      spare_[i] = Tensor();
    }
  }

 private:
  std::vector<Tensor> params_, spare_;  // spare_: the gradients of the chunk not current
  int current_ = 0;
};

// One forward_backward_step on this stage, as named operations: the batch cut into
// micro-batches (begin), a micro-batch's forward on one model chunk (forward_step) and its
// backward (backward_step), the receives posted ahead (post), and the result (finish).
class StepRun {
 public:
  using Op = PipelineSchedule::Op;
  using Part = PipelineSchedule::Part;
  StepRun(PipelineP2P& p2p, PipelineStepStats& stats, ModelWrapper& model, const StageCriterion& criterion,
          OptimizerWrapper* optimizer, bool return_loss, bool return_outputs)
      : p2p_(p2p), stats_(stats), model_(model), criterion_(criterion), optimizer_(optimizer),
        return_loss_(return_loss), return_outputs_(return_outputs), training_(autograd::GradMode::enabled()) {}

  /// Checks the arguments, takes the batch and cuts it; returns the number of micro-batches.
  int64_t begin(const DataIter& data_iter, const ScheduleOptions& opts, const PipelineStageManager& sm);
  /// Posts op's receive if it has one and it can be posted now (ahead: only when the
  /// metadata is cached, so posting does not block).
  void post(const Op& op, bool ahead);
  /// Micro-batch op.microbatch through model chunk op.chunk: its input from the batch or the
  /// previous stage, its output to the next stage or through the criterion.
  void forward_step(const Op& op);
  /// Its backward: from the loss on the last stage, else from the next stage's gradients;
  /// the input gradients go to the previous stage.
  void backward_step(const Op& op);
  /// Its W pass (after a B): the weights' gradients the B left in the store.
  void weight_step(const Op& op);
  /// Waits for the sends, checks nothing is left over; the result (last stage only).
  PipelineResult finish(bool last_stage);
  bool training() const { return training_; }

 private:
  struct Live {  // a micro-batch between its forward and its backward
    TensorMap inputs, outputs;
    Tensor loss;
    size_t held = 0;  // bytes its forward left allocated
  };
  TensorMap micro(int64_t i) const;
  /// Waits for op's receive (posting it first if needed).
  TensorMap take(const Op& op);
  /// The loss of a micro-batch's outputs on the last stage, weighted by its share of the batch.
  void apply_criterion(const Op& op, Live& l, const TensorMap& out);

  PipelineP2P& p2p_;
  PipelineStepStats& stats_;
  ModelWrapper& model_;
  const StageCriterion& criterion_;
  OptimizerWrapper* optimizer_;
  const bool return_loss_, return_outputs_, training_;
  std::optional<TensorMap> batch_;
  int64_t rows_ = 0;
  std::vector<int64_t> sizes_, offsets_;
  std::vector<nn::StageSpec> specs_;
  std::map<std::pair<int, int64_t>, Live> live_;
  std::map<std::pair<int, int64_t>, autograd::WeightGradStore> weights_;  // B run, W not yet
  ChunkGradients tied_;
  std::map<std::tuple<bool, int, int64_t>, PendingRecv> posted_;
  std::vector<TensorMap> outs_;
  int in_flight_ = 0;
  size_t held_bytes_ = 0;
  double loss_sum_ = 0;
  bool have_loss_ = false;
};

int64_t StepRun::begin(const DataIter& data_iter, const ScheduleOptions& opts, const PipelineStageManager& sm) {
  BOOSTER_CHECK(bool(data_iter), "execute_pipeline: no data iterator was given");
  BOOSTER_CHECK(!training_ || optimizer_ != nullptr, "execute_pipeline: training needs the optimizer "
                "(run evaluation with gradients off, under NoGradGuard)");
  auto* pm = dynamic_cast<nn::PipelineModule*>(model_.module().get());
  BOOSTER_CHECK(pm != nullptr, "execute_pipeline: a ", model_.module()->type_name(),
                " cannot run as pipeline stages (it does not implement nn::PipelineModule)");
  batch_ = data_iter();
  BOOSTER_CHECK(batch_.has_value() && !batch_->empty(), "execute_pipeline: the data iterator gave no batch");
  rows_ = batch_->begin()->second.shape().at(0);
  for (auto& [k, t] : *batch_)
    BOOSTER_CHECK(t.dim() >= 1 && t.shape()[0] == rows_, "execute_pipeline: batch tensor '", k, "' has ",
                  t.dim() ? t.shape()[0] : 0, " rows, '", batch_->begin()->first, "' has ", rows_,
                  "; every tensor is cut into micro-batches along dim 0");
  sizes_ = microbatch_sizes(rows_, opts, training_);
  offsets_.assign(sizes_.size(), 0);
  for (size_t i = 1; i < sizes_.size(); ++i) offsets_[i] = offsets_[i - 1] + sizes_[i - 1];
  for (int c = 0; c < sm.num_model_chunks(); ++c) specs_.push_back(sm.stage_spec(pm->num_pipeline_layers(), c));
  if (training_ && specs_.size() == 2 && specs_[0].first && specs_[1].last) {
    std::vector<Tensor> tied;
    for (const std::string& name : pm->tied_parameters())
      if (Tensor t = model_.module()->get_tensor(name); t.defined()) tied.push_back(t);
    tied_.hold(std::move(tied));
  }
  outs_.resize(sizes_.size());
  return int64_t(sizes_.size());
}

TensorMap StepRun::micro(int64_t i) const {
  TensorMap mb;
  for (auto& [k, t] : *batch_) mb[k] = t.narrow(0, offsets_[size_t(i)], sizes_[size_t(i)]);
  return mb;
}

void StepRun::post(const Op& op, bool ahead) {
  const nn::StageSpec& spec = specs_[size_t(op.chunk)];
  const auto key = std::make_tuple(op.forward, op.chunk, op.microbatch);
  if (op.part == Part::weight) return;  // a W receives nothing
  if ((op.forward ? spec.first : spec.last) || posted_.count(key)) return;  // no receive, or posted
  if (op.forward) {
    const int64_t mkey = p2p_key(sizes_[size_t(op.microbatch)], training_);
    if (ahead && !p2p_.forward_meta_cached(op.chunk, mkey)) return;
    posted_[key] = p2p_.post_recv_forward(op.chunk, mkey);
  } else {
    auto it = live_.find({op.chunk, op.microbatch});
    if (it == live_.end() || it->second.outputs.empty()) return;  // its forward has not run yet
    posted_[key] = p2p_.post_recv_backward(op.chunk, it->second.outputs);
  }
}

TensorMap StepRun::take(const Op& op) {
  const auto t0 = Clock::now();
  post(op, false);
  auto it = posted_.find(std::make_tuple(op.forward, op.chunk, op.microbatch));
  TensorMap got = p2p_.wait(it->second, training_);
  posted_.erase(it);
  stats_.wait_seconds += since(t0);
  return got;
}

void StepRun::apply_criterion(const Op& op, Live& l, const TensorMap& out) {
  if (!training_ && !return_loss_) return;
  BOOSTER_CHECK(bool(criterion_), "execute_pipeline: the last stage needs a criterion for the loss");
  // Weighted by the micro-batch's share of the batch: 1/M, and exact for a ragged last one.
  Tensor loss = criterion_(out, micro(op.microbatch)) * (double(sizes_[size_t(op.microbatch)]) / double(rows_));
  loss_sum_ += loss.detach().item();
  have_loss_ = true;
  if (training_) l.loss = loss;
}

void StepRun::forward_step(const Op& op) {
  ProfileScope prof_("pipeline forward");
  const nn::StageSpec& spec = specs_[size_t(op.chunk)];
  Live& l = live_[{op.chunk, op.microbatch}];
  TensorMap in = spec.first ? micro(op.microbatch) : take(op);
  if (training_ && !spec.first) l.inputs = in;
  const size_t before = host_tier().bytes_in_use();
  TensorMap out = model_.stage_forward(in, spec);
  if (spec.last) {
    apply_criterion(op, l, out);
    if (return_outputs_)
      for (auto& [k, t] : out) outs_[size_t(op.microbatch)][k] = t.detach();
  } else {
    size_t bytes = 0;
    for (auto& [k, t] : out) bytes += t.nbytes();
    stats_.message_bytes = std::max(stats_.message_bytes, bytes);
    p2p_.send_forward(out, op.chunk, p2p_key(sizes_[size_t(op.microbatch)], training_));
    if (training_) l.outputs = std::move(out);
  }
  if (!training_) {
    live_.erase({op.chunk, op.microbatch});
    return;
  }
  l.held = std::max(host_tier().bytes_in_use(), before) - before;
  held_bytes_ += l.held;
  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, held_bytes_);
  stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight_);
}

void StepRun::backward_step(const Op& op) {
  ProfileScope prof_("pipeline backward");
  const nn::StageSpec& spec = specs_[size_t(op.chunk)];
  auto it = live_.find({op.chunk, op.microbatch});
  BOOSTER_CHECK(it != live_.end(), "pipeline schedule: backward of micro-batch ", op.microbatch, " chunk ", op.chunk,
                " before its forward");
  Live& l = it->second;
  tied_.enter(op.chunk);
  {
    // B of a split backward: the weights' products wait in the store for the W pass.
    autograd::WeightGradStore* store = op.part == Part::input ? &weights_[{op.chunk, op.microbatch}] : nullptr;
    autograd::StoreWeightGrads collect(store);
    if (spec.last) {
      optimizer_->backward(l.loss);
    } else {
      TensorMap grads = take(op);
      size_t left = grads.size();
      for (auto& [k, g] : grads) optimizer_->backward_by_grad(l.outputs.at(k), g, /*retain_graph=*/--left > 0);
    }
  }
  if (!spec.first) {
    TensorMap input_grads;
    for (auto& [k, t] : l.inputs)
      if (t.requires_grad()) input_grads[k] = t.grad().defined() ? t.grad() : Tensor::zeros(t.shape(), t.dtype());
    p2p_.send_backward(input_grads, op.chunk);
  }
  held_bytes_ -= std::min(held_bytes_, l.held);
  --in_flight_;
  live_.erase(it);
}

void StepRun::weight_step(const Op& op) {
  ProfileScope prof_("pipeline weight gradients");
  auto it = weights_.find({op.chunk, op.microbatch});
  BOOSTER_CHECK(it != weights_.end(), "pipeline schedule: W of micro-batch ", op.microbatch, " chunk ", op.chunk,
                " before its B");
  tied_.enter(op.chunk);
  it->second.run();
  weights_.erase(it);
}

PipelineResult StepRun::finish(bool last_stage) {
  const auto t0 = Clock::now();
  p2p_.wait_sends();
  stats_.wait_seconds += since(t0);
  BOOSTER_CHECK(posted_.empty() && live_.empty() && weights_.empty(), "pipeline schedule: ", posted_.size(),
                " receives, ", live_.size(), " micro-batches and ", weights_.size(),
                " weight-gradient passes left over after the step");
  tied_.merge();
  PipelineResult r;
  if (!last_stage) return r;
  if (return_loss_ && have_loss_) r.loss = Tensor::scalar(loss_sum_);
  if (return_outputs_) {
    for (auto& [k, first] : outs_.front()) {
      std::vector<Tensor> parts;
      for (auto& o : outs_) parts.push_back(o.at(k));
      r.outputs[k] = concat(parts, 0);
    }
  }
  return r;
}

}  // namespace

PipelineResult PipelineSchedule::forward_backward_step(ModelWrapper& model, const DataIter& data_iter,
                                                       const StageCriterion& criterion, OptimizerWrapper* optimizer,
                                                       bool return_loss, bool return_outputs) {
  const auto step_start = Clock::now();
  stats_ = {};
  StepRun run(p2p_, stats_, model, criterion, optimizer, return_loss, return_outputs);
  const int64_t M = run.begin(data_iter, opts_, sm_);
  const bool training = run.training();
  if (training) check_microbatches(M);
  // The micro-batches' backwards accumulate locally; the stage's gradients are reduced
  // over its data-parallel group once, after the last (a user's no_sync still holds).
  DeferredSync sync(training ? model.grad_sync() : nullptr);
  const std::vector<Op> ops = order(M, !training);
  std::vector<PassTime> passes;
  for (size_t n = 0; n < ops.size(); ++n) {
    if (opts_.overlap_p2p && n + 1 < ops.size()) {
      // Receives on one channel match in the order they are posted: this op's first.
      run.post(ops[n], false);
      run.post(ops[n + 1], true);
    }
    const auto t0 = Clock::now();
    const double waited = stats_.wait_seconds;
    if (ops[n].forward) run.forward_step(ops[n]);
    else if (ops[n].part == Part::weight) run.weight_step(ops[n]);
    else run.backward_step(ops[n]);
    passes.push_back({ops[n], since(t0) - (stats_.wait_seconds - waited)});
    p2p_.progress();
  }
  PipelineResult result = run.finish(sm_.is_last_stage());
  const auto t0 = Clock::now();
  if (training) sum_tied_gradients(model);
  sync.sync();
  stats_.sync_seconds = since(t0);
  stats_.microbatches = M;
  stats_.seconds = since(step_start);
  if (training) after_step(passes);
  return result;
}

std::vector<Tensor> tied_copies(nn::Module& model, const nn::PipelineModule& pm, const PipelineStageManager& stages) {
  std::vector<Tensor> out;
  if (stages.is_first_stage()) return out;
  for (const std::string& name : pm.tied_parameters())
    if (Tensor t = model.get_tensor(name); t.defined()) out.push_back(t);
  return out;
}

void keep_stage_modules(nn::Module& model, const nn::PipelineModule& pm, const PipelineStageManager& stages,
                        OptimizerWrapper* optimizer) {
  // Every rank asks the model for every slot's modules first: a model that cannot be split
  // this way refuses on every rank alike, before any stage waits on another.
  for (int slot = 0; slot < stages.num_slots(); ++slot) pm.stage_modules(stages.slot_spec(pm.num_pipeline_layers(), slot));
  std::vector<std::string> held;
  for (int c = 0; c < stages.num_model_chunks(); ++c)
    for (auto& path : pm.stage_modules(stages.stage_spec(pm.num_pipeline_layers(), c))) held.push_back(path + ".");
  auto is_held = [&](const std::string& name) {
    for (auto& h : held)
      if (name.compare(0, h.size(), h) == 0) return true;
    return false;
  };
  for (auto& [name, t] : model.state_dict())  // parameters and buffers
    if (!is_held(name)) model.replace_tensor(name, Tensor());
  if (optimizer)
    for (auto& g : optimizer->param_groups())
      g.params.erase(std::remove_if(g.params.begin(), g.params.end(), [&](auto& np) { return !is_held(np.first); }),
                     g.params.end());
}

}  // namespace booster::pipeline
