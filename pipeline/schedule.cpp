// Pipeline schedules (see schedule.h).
#include "pipeline/schedule.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/autograd/grad_mode.h"
#include "core/common/check.h"
#include "core/common/profiler.h"
#include "core/kernels/ops.h"
#include "core/tensor/allocator.h"

namespace booster::pipeline {

std::vector<int64_t> microbatch_sizes(int64_t batch, const ScheduleOptions& o, bool training) {
  BOOSTER_CHECK(o.num_microbatches > 0 || o.microbatch_size > 0,
                "pipeline schedule: set num_microbatches or microbatch_size");
  BOOSTER_CHECK(batch > 0, "pipeline schedule: the batch is empty");
  int64_t mbs = o.microbatch_size;
  if (o.num_microbatches > 0) {
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
  return sizes;
}

PipelineSchedule::PipelineSchedule(const PipelineStageManager& stages, ScheduleOptions opts)
    : sm_(stages), opts_(opts), p2p_(stages, opts.enable_metadata_cache) {}

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

PipelineResult PipelineSchedule::forward_backward_step(ModelWrapper& model, const DataIter& data_iter,
                                                       const StageCriterion& criterion, OptimizerWrapper* optimizer,
                                                       bool return_loss, bool return_outputs, const GradSync& sync) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto step_start = Clock::now();
  stats_ = {};
  const bool training = autograd::GradMode::enabled();
  BOOSTER_CHECK(bool(data_iter), "execute_pipeline: no data iterator was given");
  BOOSTER_CHECK(!training || optimizer != nullptr, "execute_pipeline: training needs the optimizer "
                "(run evaluation with gradients off, under NoGradGuard)");
  auto* pm = dynamic_cast<nn::PipelineModule*>(model.module().get());
  BOOSTER_CHECK(pm != nullptr, "execute_pipeline: a ", model.module()->type_name(),
                " cannot run as pipeline stages (it does not implement nn::PipelineModule)");
  std::optional<TensorMap> batch = data_iter();
  BOOSTER_CHECK(batch.has_value() && !batch->empty(), "execute_pipeline: the data iterator gave no batch");
  const int64_t rows = batch->begin()->second.shape().at(0);
  for (auto& [k, t] : *batch)
    BOOSTER_CHECK(t.dim() >= 1 && t.shape()[0] == rows, "execute_pipeline: batch tensor '", k, "' has ",
                  t.dim() ? t.shape()[0] : 0, " rows, '", batch->begin()->first, "' has ", rows,
                  "; every tensor is cut into micro-batches along dim 0");
  const std::vector<int64_t> sizes = microbatch_sizes(rows, opts_, training);
  const int64_t M = int64_t(sizes.size());
  if (training) check_microbatches(M);
  std::vector<int64_t> offsets(size_t(M), 0);
  for (int64_t i = 1; i < M; ++i) offsets[size_t(i)] = offsets[size_t(i - 1)] + sizes[size_t(i - 1)];
  auto micro = [&](int64_t i) {
    TensorMap mb;
    for (auto& [k, t] : *batch) mb[k] = t.narrow(0, offsets[size_t(i)], sizes[size_t(i)]);
    return mb;
  };
  std::vector<nn::StageSpec> specs;
  for (int c = 0; c < sm_.num_model_chunks(); ++c) specs.push_back(sm_.stage_spec(pm->num_pipeline_layers(), c));

  struct Live {
    TensorMap inputs, outputs;
    Tensor loss;
    size_t held = 0;  // bytes its forward left allocated
  };
  int in_flight = 0;
  size_t held_bytes = 0;
  std::map<std::pair<int, int64_t>, Live> live;
  std::map<std::tuple<bool, int, int64_t>, PendingRecv> posted;
  auto needs_recv = [&](const Op& op) { return op.forward ? !specs[size_t(op.chunk)].first : !specs[size_t(op.chunk)].last; };
  // Posts op's receive if it has one and can be posted now without blocking.
  auto post = [&](const Op& op, bool ahead) {
    const auto key = std::make_tuple(op.forward, op.chunk, op.microbatch);
    if (!needs_recv(op) || posted.count(key)) return;
    const int64_t mkey = p2p_key(sizes[size_t(op.microbatch)], training);
    if (op.forward) {
      if (ahead && !p2p_.forward_meta_cached(op.chunk, mkey)) return;
      posted[key] = p2p_.post_recv_forward(op.chunk, mkey);
    } else {
      auto it = live.find({op.chunk, op.microbatch});
      if (it == live.end() || it->second.outputs.empty()) return;  // its forward has not run yet
      posted[key] = p2p_.post_recv_backward(op.chunk, it->second.outputs);
    }
  };
  auto take = [&](const Op& op) {
    const auto t0 = Clock::now();
    post(op, false);
    auto it = posted.find(std::make_tuple(op.forward, op.chunk, op.microbatch));
    TensorMap got = p2p_.wait(it->second, training);
    posted.erase(it);
    stats_.wait_seconds += since(t0);
    return got;
  };

  double loss_sum = 0;
  bool have_loss = false;
  std::vector<TensorMap> outs(static_cast<size_t>(M));
  if (training && sync.defer) sync.defer();
  const std::vector<Op> ops = order(M, !training);
  for (size_t n = 0; n < ops.size(); ++n) {
    const Op& op = ops[n];
    const nn::StageSpec& spec = specs[size_t(op.chunk)];
    if (opts_.overlap_p2p && n + 1 < ops.size()) {
      // Receives on one channel match in the order they are posted: this op's first.
      post(op, false);
      post(ops[n + 1], true);
    }
    if (op.forward) {
      ProfileScope prof_("pipeline forward");
      Live& l = live[{op.chunk, op.microbatch}];
      TensorMap in = spec.first ? micro(op.microbatch) : take(op);
      if (training && !spec.first) l.inputs = in;
      const size_t before = host_tier().bytes_in_use();
      TensorMap out = model.stage_forward(in, spec);
      if (spec.last) {
        if (training || return_loss) {
          BOOSTER_CHECK(bool(criterion), "execute_pipeline: the last stage needs a criterion for the loss");
          // Weighted by the micro-batch's share of the batch: 1/M, and exact for a ragged last one.
          Tensor loss = criterion(out, micro(op.microbatch)) * (double(sizes[size_t(op.microbatch)]) / double(rows));
          loss_sum += loss.detach().item();
          have_loss = true;
          if (training) l.loss = loss;
        }
        if (return_outputs)
          for (auto& [k, t] : out) outs[size_t(op.microbatch)][k] = t.detach();
      } else {
        p2p_.send_forward(out, op.chunk, p2p_key(sizes[size_t(op.microbatch)], training));
        if (training) l.outputs = std::move(out);
      }
      if (training) {
        l.held = std::max(host_tier().bytes_in_use(), before) - before;
        held_bytes += l.held;
        stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, held_bytes);
        stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight);
      } else {
        live.erase({op.chunk, op.microbatch});
      }
    } else {
      ProfileScope prof_("pipeline backward");
      auto it = live.find({op.chunk, op.microbatch});
      BOOSTER_CHECK(it != live.end(), "pipeline schedule: backward of micro-batch ", op.microbatch, " chunk ", op.chunk,
                    " before its forward");
      Live& l = it->second;
      if (spec.last) {
        optimizer->backward(l.loss);
      } else {
        TensorMap grads = take(op);
        size_t left = grads.size();
        for (auto& [k, g] : grads) optimizer->backward_by_grad(l.outputs.at(k), g, /*retain_graph=*/--left > 0);
      }
      if (!spec.first) {
        TensorMap input_grads;
        for (auto& [k, t] : l.inputs)
          if (t.requires_grad()) input_grads[k] = t.grad().defined() ? t.grad() : Tensor::zeros(t.shape(), t.dtype());
        p2p_.send_backward(input_grads, op.chunk);
      }
      held_bytes -= std::min(held_bytes, l.held);
      --in_flight;
      live.erase(it);
    }
    p2p_.progress();
  }
  {
    const auto t0 = Clock::now();
    p2p_.wait_sends();
    stats_.wait_seconds += since(t0);
  }
  BOOSTER_CHECK(posted.empty() && live.empty(), "pipeline schedule: ", posted.size(), " receives and ", live.size(),
                " micro-batches left over after the step");
  if (training && sync.sync) {
    const auto t0 = Clock::now();
    sync.sync();
    stats_.sync_seconds = since(t0);
  }
  stats_.microbatches = M;
  stats_.seconds = since(step_start);

  PipelineResult r;
  if (!sm_.is_last_stage()) return r;
  if (return_loss && have_loss) r.loss = Tensor::scalar(loss_sum);
  if (return_outputs) {
    for (auto& [k, t0] : outs.front()) {
      std::vector<Tensor> parts;
      for (auto& o : outs) parts.push_back(o.at(k));
      r.outputs[k] = concat(parts, 0);
    }
  }
  return r;
}

}  // namespace booster::pipeline
