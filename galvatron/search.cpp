// Galvatron's search (see search.h).
#include "galvatron/search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/common/check.h"

namespace booster::galvatron {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int> powers_up_to(int n) {
  std::vector<int> out;
  for (int v = 1; v <= n; v *= 2) out.push_back(v);
  return out;
}

HybridPlan base_plan(const SearchOptions& o, int pp, int vtp, bool vsp, int64_t m) {
  HybridPlan p;
  p.pp_deg = pp, p.vtp = vtp, p.vsp = vsp, p.chunks = m, p.global_bsz = o.global_bsz;
  p.pipeline_type = o.pipeline_type, p.default_dp_type = o.default_dp_type;
  return p;
}

bool rows_divide(int64_t rows, int stage, int tp) { return rows % (stage / tp) == 0; }

// Galvatron's sp_space at a degree above 1: tensor parallel (tp), Ulysses (sp) or both.
bool sp_space_skips(const SearchOptions& o, int degree, bool sp) {
  return degree == 1 ? sp : (sp ? o.sp_space == "tp" : o.sp_space == "sp");
}

// One stage's layers by the knapsack over memory: the strategies with the least time whose
// memory fits `budget_mb`, or empty when none fits.
std::vector<LayerStrategy> best_stage(const CostModel& cm, const HybridPlan& plan, const std::vector<LayerStrategy>& ss,
                                      int64_t layers, int stage, double rows, int64_t in_flight, int64_t m,
                                      double budget_mb, double step_mb) {
  const int V = int(std::floor(budget_mb / step_mb));
  if (V < 0) return {};
  const size_t S = ss.size();
  std::vector<int> mem(S);
  std::vector<double> time(S);
  for (size_t s = 0; s < S; ++s) {
    const double mb = cm.layer_states_mb(plan, ss[s], stage) + cm.layer_act_mb(ss[s], stage, rows) * double(in_flight);
    mem[s] = int(std::ceil(mb / step_mb));
    double sync = 0;
    time[s] = cm.layer_ms(plan, ss[s], stage, rows, &sync) * double(m) + sync;
  }
  const LayerStrategy edge = CostModel::edge(plan);  // the embeddings' layout
  // f[v][s]: least time of the layers so far using at most v memory units, the last in strategy s.
  std::vector<std::vector<double>> f(size_t(V) + 1, std::vector<double>(S, kInf));
  std::vector<std::vector<std::vector<int16_t>>> mark(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<std::vector<double>> g(size_t(V) + 1, std::vector<double>(S, kInf));
    mark[size_t(l)].assign(size_t(V) + 1, std::vector<int16_t>(S, -1));
    for (int v = 0; v <= V; ++v)
      for (size_t s = 0; s < S; ++s) {
        if (mem[s] > v) continue;
        const int rest = v - mem[s];
        if (l == 0) {
          g[size_t(v)][s] = time[s] + cm.switch_ms(edge, ss[s], stage, rows) * double(m);
          continue;
        }
        for (size_t q = 0; q < S; ++q) {
          const double c = f[size_t(rest)][q] + time[s] + cm.switch_ms(ss[q], ss[s], stage, rows) * double(m);
          if (c < g[size_t(v)][s]) g[size_t(v)][s] = c, mark[size_t(l)][size_t(v)][s] = int16_t(q);
        }
      }
    f = std::move(g);
  }
  double best = kInf;
  size_t bs = 0;
  for (size_t s = 0; s < S; ++s) {
    const double c = f[size_t(V)][s] + cm.switch_ms(ss[s], edge, stage, rows) * double(m);
    if (c < best) best = c, bs = s;
  }
  if (!std::isfinite(best)) return {};
  std::vector<LayerStrategy> out(static_cast<size_t>(layers));
  int v = V;
  size_t s = bs;
  for (int64_t l = layers - 1; l >= 0; --l) {
    out[size_t(l)] = ss[s];
    if (l == 0) break;
    const int q = mark[size_t(l)][size_t(v)][s];
    v -= mem[s];
    s = size_t(q);
  }
  return out;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.fits != b.fits) return a.fits;
  return a.cost.step_ms < b.cost.step_ms;
}

void sort_fastest(std::vector<Candidate>& c) { std::stable_sort(c.begin(), c.end(), better); }

// The (pp, vtp, vsp, micro-batches) the search loops over, with the stage's micro-batch rows:
// a vocab degree above 1 as tensor parallelism, Ulysses (vsp) or both, as sp_space says.
template <typename F>
void for_each_layout(const SearchOptions& o, int world, F&& f) {
  const int max_pp = o.max_pp > 0 ? std::min(o.max_pp, world) : world;
  for (int pp : powers_up_to(max_pp)) {
    if (world % pp || pp > o.num_layers) continue;
    const int stage = world / pp;
    const int max_tp = o.max_tp > 0 ? std::min(o.max_tp, stage) : stage;
    for (int vtp : powers_up_to(o.vtp ? max_tp : 1))
      for (bool vsp : {false, true}) {
        if (sp_space_skips(o, vtp, vsp)) continue;
        for (int64_t m = pp == 1 ? 1 : pp; m <= (pp == 1 ? 1 : std::max<int64_t>(o.max_chunks, pp)); m *= 2) {
          if (o.global_bsz % m) continue;  // a pipeline needs >= pp micro-batches
          const int64_t rows = o.global_bsz / m;
          if (!rows_divide(rows, stage, vtp)) continue;
          f(base_plan(o, pp, vtp, vsp, m), rows);
        }
      }
  }
}

}  // namespace

std::vector<LayerStrategy> strategies(int stage, const SearchOptions& o) {
  std::vector<LayerStrategy> out;
  const int max_tp = o.max_tp > 0 ? std::min(o.max_tp, stage) : stage;
  for (int t : powers_up_to(max_tp)) {
    const int dp = stage / t;
    for (bool consec : {true, false}) {
      if (!consec && (t == 1 || t == stage || !o.tp_consec_off)) continue;
      for (bool sp : {false, true}) {
        if (sp_space_skips(o, t, sp)) continue;
        for (bool sdp : {false, true}) {
          if (sdp && ((sp ? stage : dp) == 1 || !o.sdp)) continue;
          for (bool ckpt : {false, true}) {
            if (ckpt && !o.checkpoint) continue;
            out.push_back({t, consec, sdp, ckpt, sp});
          }
        }
      }
    }
  }
  return out;
}

namespace {

// Stage partitions of `layers` over pp stages near the even split (HybridPlan's: the
// remainder on the last), each stage within `spread` layers of it and holding one at least.
// Galvatron fixes the partition before its search; here the cost model weighs each (the first
// stage holds the embeddings and, under 1F1B, the most micro-batches in flight).
std::vector<std::vector<int64_t>> partitions(int64_t layers, int pp, int64_t spread) {
  HybridPlan even;
  even.pp_deg = pp;
  even.layers.assign(size_t(layers), LayerStrategy{});
  const auto base = even.stage_layers();
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> cur;
  auto walk = [&](auto&& self, int k, int64_t left) -> void {
    if (k == pp - 1) {
      if (left >= 1 && std::abs(left - base[size_t(k)]) <= spread) {
        cur.push_back(left);
        out.push_back(cur);
        cur.pop_back();
      }
      return;
    }
    for (int64_t n = std::max<int64_t>(1, base[size_t(k)] - spread); n <= base[size_t(k)] + spread; ++n) {
      if (left - n < pp - k - 1) break;
      cur.push_back(n);
      self(self, k + 1, left - n);
      cur.pop_back();
    }
  };
  walk(walk, 0, layers);
  return out;
}

// The knapsack over every stage of `plan` (its layout and partition set), searched again
// under a lowered budget while the cost model finds the result over it; nothing where a
// stage has no plan that fits.
std::optional<Candidate> search_partition(const CostModel& cm, const SearchOptions& o, HybridPlan plan,
                                          const std::vector<LayerStrategy>& ss, int64_t rows, double step) {
  const int pp = plan.pp_deg, stage = cm.world() / pp;
  const int64_t m = plan.chunks;
  plan.layers.assign(size_t(o.num_layers), LayerStrategy{});
  const auto per = plan.stage_layers();
  // What a stage holds besides its layers (the layers' plan is not known yet: score the
  // all-DDP plan once and take each stage's non-layer part).
  const PlanCost all_ddp = cm.cost(plan);
  const LayerStrategy ddp{};
  std::vector<double> fixed(static_cast<size_t>(pp));
  for (int k = 0; k < pp; ++k)
    fixed[size_t(k)] = all_ddp.stages[size_t(k)].memory_mb -
                       double(per[size_t(k)]) * (cm.layer_states_mb(plan, ddp, stage) +
                                                 cm.layer_act_mb(ddp, stage, double(rows)) * double(plan.in_flight(k)));
  // The knapsack's memory is additive over layers (states, activations in flight); the
  // peak the cost model finds may lie elsewhere (a checkpointed layer's recompute beside
  // the gradients of the layers after it). A plan over the budget is searched again under
  // a budget lowered by its excess, a few times at most.
  double budget = o.memory_mb;
  for (int attempt = 0; attempt < 6; ++attempt) {
    int64_t first = 0;
    for (int k = 0; k < pp; ++k) {
      auto chosen = best_stage(cm, plan, ss, per[size_t(k)], stage, double(rows), plan.in_flight(k), m,
                               budget - fixed[size_t(k)], step);
      if (chosen.empty()) return std::nullopt;  // this layout does not fit
      std::copy(chosen.begin(), chosen.end(), plan.layers.begin() + first);
      first += per[size_t(k)];
    }
    const PlanCost cost = cm.cost(plan);
    if (cost.memory_mb <= o.memory_mb || attempt == 5) return Candidate{plan, cost, cost.memory_mb <= o.memory_mb};
    budget -= cost.memory_mb - o.memory_mb + step;
  }
  return std::nullopt;
}

}  // namespace

std::vector<Candidate> search(const CostModel& cm, const SearchOptions& o) {
  BOOSTER_CHECK(o.num_layers > 0 && o.global_bsz > 0 && o.memory_mb > 0, "galvatron_search: needs the model's layers, "
                "a global batch and a memory budget");
  const int world = cm.world();
  const double step = o.memory_step_mb > 0 ? o.memory_step_mb : std::max(1.0, o.memory_mb / 2048);
  std::vector<Candidate> out;
  for_each_layout(o, world, [&](const HybridPlan& base, int64_t rows) {
    const int pp = base.pp_deg, stage = world / pp;
    std::vector<LayerStrategy> ss;
    for (auto& s : strategies(stage, o))
      if (rows_divide(rows, stage, s.tp)) ss.push_back(s);
    std::optional<Candidate> best;
    for (auto& division : partitions(o.num_layers, pp, pp == 1 ? 0 : o.partition_spread)) {
      HybridPlan plan = base;
      if (pp > 1) plan.pp_division = division;
      auto c = search_partition(cm, o, plan, ss, rows, step);
      if (c && (!best || better(*c, *best))) best = std::move(c);
    }
    if (best) out.push_back(std::move(*best));
  });
  sort_fastest(out);
  return out;
}

std::vector<Candidate> global_plans(const CostModel& cm, const SearchOptions& o) {
  std::vector<Candidate> out;
  for_each_layout(o, cm.world(), [&](const HybridPlan& base, int64_t rows) {
    const int stage = cm.world() / base.pp_deg;
    for (auto& s : strategies(stage, o)) {
      // vocab_tp 1 or the layers' degree, tensor parallel or Ulysses as they are
      if (!rows_divide(rows, stage, s.tp) || (base.vtp != 1 && (base.vtp != s.tp || base.vsp != s.ulysses()))) continue;
      HybridPlan plan = base;
      plan.layers.assign(size_t(o.num_layers), s);
      Candidate c{plan, cm.cost(plan), false};
      c.fits = c.cost.memory_mb <= o.memory_mb;
      out.push_back(std::move(c));
    }
  });
  sort_fastest(out);
  return out;
}

}  // namespace booster::galvatron
