// Galvatron's cost model for this runtime (see cost_model.h).
#include "galvatron/cost_model.h"

#include <algorithm>

#include "core/common/check.h"
#include "core/dist/ring_collectives.h"

namespace booster::galvatron {

namespace {
constexpr double kMB = 1 << 20;

// A gradient of `params` parameters (`mb` MB) as the backward leaves it: staged whole for
// its reduction (DDP's bucket, ZeRO's reduce-scatter input; ZeRO frees the parameter's own
// once staged) and, while the reduction is in flight (until the backward ends), the ring's
// other buffer (communication): the reduce-scatter's output, 1/dp of it, or the all-reduce's
// receive buffer, one f32 piece of a round (ring_collectives.h) or the round's block where
// that is smaller.
MemoryParts in_flight_grad_mb(double mb, double params, int dp, bool all_reduce) {
  MemoryParts g;
  g.grads = mb;
  if (dp <= 1) return g;
  g.communication = !all_reduce ? mb / dp : std::min(params / dp, double(dist::ring_piece_elements())) * 4 / kMB;
  return g;
}

MemoryParts larger(const MemoryParts& a, const MemoryParts& b) { return a.total() >= b.total() ? a : b; }

// The step over the stages: fill and drain of m micro-batches, then the exposed part of the
// gradient sync after the last backward (overlap coefficient a), then the optimizer.
double pipeline_ms(const std::vector<StageCost>& stages, int64_t m, double a) {
  double sum = 0, slowest = 0, exposed = 0, optimizer = 0;
  for (auto& s : stages) {
    sum += s.fwd_bwd_ms;
    slowest = std::max(slowest, s.fwd_bwd_ms);
    const double b = s.last_bwd_ms, d = s.sync_ms;
    exposed = std::max(exposed, std::max(0.0, d - b) + (a - 1) * std::min(b, d));
    optimizer = std::max(optimizer, s.optimizer_ms);
  }
  return sum + double(m - 1) * slowest + exposed + optimizer;
}
}  // namespace

MemoryParts& MemoryParts::operator+=(const MemoryParts& o) {
  params += o.params, grads += o.grads, masters += o.masters, optimizer += o.optimizer;
  activations += o.activations, buffers += o.buffers, communication += o.communication;
  return *this;
}

MemoryParts MemoryParts::operator*(double k) const {
  return {params * k, grads * k, masters * k, optimizer * k, activations * k, buffers * k, communication * k};
}

std::vector<std::pair<const char*, double>> MemoryParts::named() const {
  return {{"parameters", params},   {"gradients", grads}, {"masters", masters},
          {"optimizer states", optimizer}, {"activations", activations}, {"buffers", buffers},
          {"communication", communication}};
}

MemoryParts CostModel::backward_peak(const std::vector<LayerMemory>& layers, double held, MemoryParts grads) {
  // Layer l's backward runs beside the activations of the layers before it (a checkpointed
  // layer's: its input), its own working set, and the gradients of the layers after it,
  // staged and in flight; the largest over the layers, or the end with every gradient.
  double below = held;
  for (const auto& l : layers) below += l.act;
  MemoryParts peak;  // zero until a layer's is larger
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    below -= it->act;
    MemoryParts at = grads + it->work;
    at.activations += below;
    peak = larger(at, peak);
    grads += it->grad;
  }
  grads.activations += below;
  return larger(grads, peak);
}

CostModel::CostModel(HardwareProfile hw, ModelProfile model, int world, std::string precision)
    : hw_(std::move(hw)), model_(std::move(model)), world_(world), beta_(precision == "fp32" ? 4.0 : 2.0) {
  BOOSTER_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16", "cost model: precision must be fp32, "
                "bf16 or fp16, got '", precision, "'");
}

MemoryParts CostModel::states_per_param(DpKind kind, int dp) const {
  // At the peak (the end of a forward) a parameter holds its working copy, its fp32 master
  // and two Adam states (12 bytes); its gradient comes as the activations go (the transient).
  // DDP through ddp::Reducer holds its bucket instead of a master in fp32, beside it otherwise.
  const double split = kind == DpKind::ddp ? 1.0 : 1.0 / dp;
  MemoryParts b;
  b.params = kind == DpKind::zero3 ? beta_ / dp : beta_;
  b.masters = 4.0 * split;
  b.optimizer = 8.0 * split;
  if (kind == DpKind::ddp && ddp_buckets_) {  // ddp::Reducer's bucket; masters only under mixed precision
    b.communication = beta_;
    if (beta_ == 4.0) b.masters = 0;
  }
  return b;
}

MemoryParts CostModel::staged_grad_mb(double mb, double params, int dp, DpKind kind) const {
  MemoryParts g = in_flight_grad_mb(mb, params, dp, kind == DpKind::ddp);
  if (kind == DpKind::zero2 && zero1_) g.grads += mb;  // stage 1 keeps its own beside the staged copy
  return g;
}

int CostModel::weight_split(const LayerStrategy& s) { return s.ulysses() ? 1 : s.tp; }
int CostModel::grad_group(const LayerStrategy& s, int stage) { return s.ulysses() ? stage : stage / s.tp; }

double CostModel::layer_states_mb(const HybridPlan& plan, const LayerStrategy& s, int stage) const {
  return layer_states(plan, s, stage).total();
}

MemoryParts CostModel::layer_states(const HybridPlan& plan, const LayerStrategy& s, int stage) const {
  return states_per_param(plan.dp_kind(s), grad_group(s, stage)) * (model_.param_count / weight_split(s) / kMB);
}

double CostModel::layer_act_mb(const LayerStrategy& s, int stage, double rows) const {
  const double r = rows / (stage / s.tp);  // this rank's rows (a Ulysses layer: of its share of the tokens)
  if (s.checkpoint) return r * model_.checkpoint_act_mb_per_sample / (s.ulysses() ? s.tp : 1);  // its input
  return r * (s.ulysses() ? model_.sp_act_mb(s.tp) : model_.act_mb(s.tp));
}

double CostModel::layer_ms(const HybridPlan& plan, const LayerStrategy& s, int stage, double rows, double* sync_ms) const {
  const int dp = grad_group(s, stage);
  const double r = rows / (stage / s.tp);
  const bool sp = s.ulysses();
  double t = (sp ? model_.sp_fwd_bwd_ms(s.tp) : model_.fwd_bwd_ms(s.tp)) * r;
  if (s.checkpoint) t += (sp ? model_.sp_fwd_ms(s.tp) : model_.fwd_ms(s.tp)) * r;
  const double grad_mb = model_.param_count / weight_split(s) * beta_ / kMB;
  // The data-parallel group of a consecutive tensor-parallel group is strided, and the
  // reverse; Ulysses reduces over the whole stage (consecutive ranks).
  const bool dp_consec = sp || dp == 1 || dp == stage || !s.consecutive(stage);
  const DpKind kind = plan.dp_kind(s);
  if (kind == DpKind::zero3) {  // a gather forward, one backward: as profiled (scaled by the bandwidths), else from bandwidth
    const double model = 2 * 0.5 * hw_.allreduce_ms(grad_mb, dp, dp_consec);
    const double at = model_.zero3_group > 1 ? 2 * 0.5 * hw_.allreduce_ms(model_.param_count * beta_ / kMB, model_.zero3_group, true) : 0;
    t += model_.zero3_ms_per_layer > 0 && at > 0 ? model_.zero3_ms_per_layer * model / at : model;
  }
  if (sync_ms) *sync_ms = (kind == DpKind::ddp ? 1.0 : 0.5) * hw_.allreduce_ms(grad_mb, dp, dp_consec);
  return t;
}

double CostModel::switch_ms(const LayerStrategy& from, const LayerStrategy& to, int stage, double rows) const {
  const bool same = from.tp == to.tp && from.consecutive(stage) == to.consecutive(stage);
  double t = 0;
  const bool megatron_sp = model_.sequence_parallel;  // the plan runs as the model was profiled
  if (from.splits_tokens(megatron_sp) && !(same && to.splits_tokens(megatron_sp))) {
    // The run ends: its tokens gathered over the group, and in backward its first layer's
    // gradients (an all-gather each way, about one all-reduce).
    const double mb = rows / (stage / from.tp) * double(model_.seq * model_.hidden) * beta_ / kMB;
    t += hw_.allreduce_ms(mb, from.tp, from.consecutive(stage));
  }
  // Shrinking between consecutive groups moves nothing; otherwise a rank receives the rows
  // it lacks (about its new rows), forward and backward.
  if (same || (to.tp <= from.tp && from.consecutive(stage) && to.consecutive(stage))) return t;
  const double mb = rows / (stage / to.tp) * double(model_.seq * model_.hidden) * beta_ / kMB;
  return t + 2 * hw_.p2p_ms(mb, 1);
}

double CostModel::checkpoint_backward_mb(const LayerStrategy& s) const {
  if (!s.ulysses()) return model_.checkpoint_backward_mb(s.tp);
  // The recompute holds the layer's Ulysses activations: the profiled one scaled by them.
  return model_.checkpoint_backward_mb(1) * model_.sp_act_mb(s.tp) / model_.act_mb(1);
}

void CostModel::peak_memory(StageCost& sc, StageMemory s, int64_t in_flight, int64_t m, bool gpipe) const {
  // The peak is at the end of a forward (activations in flight, a layer's transient), in
  // the backward, or in the optimizer step (its temporaries beside the gradients, as the
  // profile measured them).
  const double held = double(in_flight - 1) * s.acts + s.other_acts;  // the other micro-batches', the embeddings'
  MemoryParts fwd_grads, bwd;
  if (m > 0) {
    // In a pipeline the reduction waits for the last micro-batch: every layer's whole
    // gradient accumulates in place. The first backward creates them as it goes, beside the
    // other micro-batches in flight; a later one has them all, beside one micro-batch fewer
    // unless 1F1B's steady state has started the next (then the forwards after a backward
    // have them too).
    MemoryParts all = s.other_grads;
    for (auto& l : s.layers) all.grads += l.whole, l.grad = MemoryParts{0, l.whole};
    const bool steady = !gpipe && m > in_flight;
    const MemoryParts first_bwd = backward_peak(s.layers, held, s.other_grads);
    for (auto& l : s.layers) l.grad = {};
    const double later_held = double(std::max<int64_t>(0, in_flight - (steady ? 1 : 2))) * s.acts + s.other_acts;
    bwd = larger(first_bwd, backward_peak(s.layers, later_held, all));
    if (steady) fwd_grads = all;
  } else {
    bwd = backward_peak(s.layers, held, s.other_grads);
  }
  MemoryParts base = s.states;
  base.buffers += model_.runtime_mb;
  bwd += base;
  sc.backward_mb = bwd.total();
  MemoryParts step = s.grads, fwd = s.transient + fwd_grads;
  step.buffers += s.updated * model_.optimizer_mb_per_param;
  fwd.activations += s.acts * double(in_flight);
  const MemoryParts other = base + larger(fwd, step);
  sc.parts = larger(bwd, other);
  sc.peak_at = bwd.total() >= other.total() ? "backward" : fwd.total() >= step.total() ? "forward" : "optimizer step";
  sc.memory_mb = sc.parts.total();
}

CostModel::LayerMemory CostModel::layer_memory(const HybridPlan& plan, const LayerStrategy& s, int stage, double rows,
                                               double stage_params, MemoryParts& held_now) const {
  const bool zero3 = plan.dp_kind(s) == DpKind::zero3;
  const int dp = grad_group(s, stage);
  const double params = model_.param_count / weight_split(s);
  // A fetched ZeRO-3 layer and the one prefetched after it (the all-gather's output, forward
  // and backward), or a unit of several layers held twice while it is gathered (the output
  // and the parameters it is copied into), beside the gather's input (this rank's slice of
  // it, communication); in backward the layer's full gradient (the profiled recompute of a
  // checkpointed layer has it).
  const double whole = params * beta_ / kMB;
  const double unit = std::max(whole, std::min(zero3_unit_ / weight_split(s), stage_params) * beta_ / kMB);
  const double fetched = zero3 ? 2 * unit : 0, sent = zero3 ? unit / dp : 0;
  held_now = {};  // what the layer adds at the forward's end: a fetched ZeRO-3 unit, else its gradient
  if (zero3) held_now.params = fetched, held_now.communication = sent;
  else held_now.grads = whole;
  const double act = layer_act_mb(s, stage, rows);
  MemoryParts work;  // its backward's working set: the recompute of a checkpointed layer, else its activations and gradient
  work.params = fetched, work.communication = sent;
  if (s.checkpoint) work.activations = checkpoint_backward_mb(s) * rows / (stage / s.tp);
  else work.activations = act, work.grads = whole;
  return {act, whole, staged_grad_mb(whole, params, dp, plan.dp_kind(s)), work};
}

PlanCost CostModel::cost(const HybridPlan& plan) const {
  BOOSTER_CHECK(plan.global_bsz > 0, "cost model: the plan needs its global batch (global_bsz)");
  const int p = plan.pp_deg, stage = world_ / p;
  const int64_t m = p == 1 ? 1 : std::max<int64_t>(plan.chunks, 1);
  const double rows = double(plan.global_bsz) / double(m);  // a stage micro-batch
  const LayerStrategy boundary = plan.boundary(), edge = CostModel::edge(plan);
  const auto per = plan.stage_layers();
  PlanCost out;
  int64_t first = 0;
  for (int k = 0; k < p; ++k) {
    StageCost sc;
    MemoryParts states, transient, grads;
    double acts = 0, sync = 0, updated = 0;
    std::vector<LayerMemory> mem;
    LayerStrategy prev = edge;
    // The embeddings (first stage) and the head (last stage): each stage's share of them.
    const auto share = [&](double embed) { return (k == 0 ? embed : 0) + (k == p - 1 ? 1 - embed : 0); };
    // The stage's parameters (its layers, its share of the embeddings and head): what a unit can hold at most.
    const double stage_params = double(per[size_t(k)]) * model_.param_count + share(model_.embed_param_share) * model_.other_param_count;
    for (int64_t l = first; l < first + per[size_t(k)]; ++l) {
      const LayerStrategy& s = plan.layers[size_t(l)];
      double sy = 0;
      const double t = layer_ms(plan, s, stage, rows, &sy);
      sc.fwd_bwd_ms += t + switch_ms(prev, s, stage, rows);
      sc.last_bwd_ms += t * (2.0 / 3.0);
      sync += sy;
      states += layer_states(plan, s, stage);
      updated += model_.param_count / weight_split(s) / (plan.dp_kind(s) == DpKind::ddp ? 1 : grad_group(s, stage));
      MemoryParts held_now;
      const LayerMemory lm = layer_memory(plan, s, stage, rows, stage_params, held_now);
      transient = larger(transient, held_now);
      acts += lm.act, grads += lm.grad;
      mem.push_back(lm);
      prev = s;
    }
    sc.fwd_bwd_ms += switch_ms(prev, edge, stage, rows);
    // The embeddings and the head at vtp: the stage's share of their parameters, activations
    // and time (under vsp whole on the group's rows: the time of all of them, the parameters
    // whole and data parallel over the stage).
    const int vdp = stage / plan.vtp, odp = grad_group(boundary, stage);
    const double other_t = model_.other_fwd_bwd_ms_per_sample > 0 ? model_.other_fwd_bwd_ms_per_sample
                                                                   : 3 * model_.other_fwd_ms_per_sample;
    sc.fwd_bwd_ms += other_t * (rows / vdp) * share(model_.embed_time_share);
    const DpKind okind = plan.embed_sdp ? DpKind::zero3 : plan.dp_kind({});
    const double other_params = share(model_.embed_param_share) * model_.other_param_count / weight_split(boundary);
    states += states_per_param(okind, odp) * (other_params / kMB);
    const MemoryParts other_grads = staged_grad_mb(other_params * beta_ / kMB, other_params, odp, okind);
    grads += other_grads;
    updated += other_params / (okind == DpKind::ddp ? 1 : odp);
    sc.optimizer_ms = updated * model_.optimizer_ms_per_param;
    const double other_acts = share(model_.embed_act_share) * model_.other_act_mb_per_sample * rows / vdp;
    acts += other_acts;
    if (p > 1) {  // the boundary's activations to the next stage and their gradients back
      const double mb = rows / vdp * double(model_.seq * model_.hidden) * beta_ / kMB;
      sc.fwd_bwd_ms += (k < p - 1 ? 1 : 0) * 2 * hw_.p2p_ms(mb, p);
    }
    sc.sync_ms = sync;
    peak_memory(sc, StageMemory{std::move(mem), states, other_grads, grads, transient, acts, other_acts, updated},
                plan.in_flight(k), p > 1 ? m : 0, plan.pipeline_type == "gpipe");
    out.stages.push_back(sc);
    out.memory_mb = std::max(out.memory_mb, sc.memory_mb);
    first += per[size_t(k)];
  }
  out.step_ms = pipeline_ms(out.stages, m, hw_.overlap_coe);
  return out;
}

}  // namespace booster::galvatron
