// Zero bubble's V schedule (see zero_bubble.h).
#include "pipeline/zero_bubble.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <string>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace booster::pipeline {

namespace {

using Op = PipelineSchedule::Op;
using Part = PipelineSchedule::Part;
constexpr double kUnknown = std::numeric_limits<double>::infinity();

// The simulated pipeline: when each pass ends on each stage (kUnknown until it ran).
class Simulation {
 public:
  Simulation(int S, int64_t m, const ZeroBubbleCosts& c, int64_t limit)
      : S_(S), m_(m), c_(c), limit_(limit), stages_(size_t(S)) {
    for (auto* end : {&f_end_, &b_end_})
      for (auto& chunk : *end) chunk.assign(size_t(S) * size_t(m), kUnknown);
  }

  void run() {
    for (;;) {
      // The free stage that can start something soonest runs its next pass.
      int best = -1;
      double best_start = kUnknown;
      for (int s = 0; s < S_; ++s) {
        const double start = next_start(s);
        if (start < best_start) best = s, best_start = start;
      }
      if (best < 0) break;
      step(best);
    }
    for (int s = 0; s < S_; ++s) {
      Stage& st = stages_[size_t(s)];
      BOOSTER_CHECK(st.nb[0] == m_ && st.nb[1] == m_, "zero bubble V schedule: the simulation stalled on stage ", s,
                    " (", st.nb[0], " and ", st.nb[1], " of ", m_, " backwards ran)");
      while (!st.pending_w.empty()) run_w(st);
    }
  }
  std::vector<std::vector<Op>> orders() const {
    std::vector<std::vector<Op>> out;
    for (auto& st : stages_) out.push_back(st.ops);
    return out;
  }
  double makespan() const {
    double t = 0;
    for (auto& st : stages_) t = std::max(t, st.clock);
    return t;
  }

 private:
  struct Stage {
    double clock = 0;
    int64_t nf[2] = {0, 0}, nb[2] = {0, 0}, held = 0;
    std::deque<std::pair<int, int64_t>> pending_w;  // (chunk, micro-batch) after its B
    std::vector<Op> ops;
  };
  double& f_end(int c, int s, int64_t i) { return f_end_[size_t(c)][size_t(s) * size_t(m_) + size_t(i)]; }
  double& b_end(int c, int s, int64_t i) { return b_end_[size_t(c)][size_t(s) * size_t(m_) + size_t(i)]; }
  // When the inputs of stage s's next forward / backward of chunk c are there (kUnknown: not yet known).
  double f_ready(int s, int c) {
    const int64_t i = stages_[size_t(s)].nf[c];
    if (i >= m_) return kUnknown;
    if (c == 0) return s == 0 ? 0.0 : f_end(0, s - 1, i) + c_.comm;
    return s == S_ - 1 ? f_end(0, s, i) : f_end(1, s + 1, i) + c_.comm;  // the turn of the V is local
  }
  double b_ready(int s, int c) {
    const int64_t i = stages_[size_t(s)].nb[c];
    if (i >= m_) return kUnknown;
    if (c == 1) return s == 0 ? f_end(1, 0, i) : b_end(1, s - 1, i) + c_.comm;  // the loss is on stage 0
    return s == S_ - 1 ? b_end(1, s, i) : b_end(0, s + 1, i) + c_.comm;
  }
  // The earliest start of stage s's next pass, by the policy of step(); kUnknown when it must
  // wait for passes of other stages not yet simulated.
  double next_start(int s) {
    Stage& st = stages_[size_t(s)];
    double ready = std::min({b_ready(s, 0), b_ready(s, 1), f_ready(s, 1)});
    if (st.held < limit_) ready = std::min(ready, f_ready(s, 0));
    if (ready <= st.clock) return st.clock;
    if (!st.pending_w.empty()) return st.clock;  // a W fills the wait
    return ready;
  }
  // Stage s runs its next pass: a ready B (the earlier ready one), else a ready forward
  // (chunk 1 first), else a W, else it waits for what comes first.
  void step(int s) {
    Stage& st = stages_[size_t(s)];
    const double t = st.clock;
    const double b0 = b_ready(s, 0), b1 = b_ready(s, 1), f1 = f_ready(s, 1);
    const double f0 = st.held < limit_ ? f_ready(s, 0) : kUnknown;
    if (std::min(b0, b1) <= t) return run_b(s, b1 <= b0 ? 1 : 0, t);
    if (std::min(f0, f1) <= t) return run_f(s, f1 <= t ? 1 : 0, t);
    if (!st.pending_w.empty()) return run_w(st);
    const double start = std::min({b0, b1, f0, f1});
    st.clock = start;  // idle until then, and run it
    step(s);
  }
  void run_f(int s, int c, double t) {
    Stage& st = stages_[size_t(s)];
    const int64_t i = st.nf[c]++;
    st.clock = f_end(c, s, i) = t + c_.f;
    ++st.held;
    st.ops.push_back({true, c, i});
  }
  void run_b(int s, int c, double t) {
    Stage& st = stages_[size_t(s)];
    const int64_t i = st.nb[c]++;
    st.clock = b_end(c, s, i) = t + c_.b;
    st.pending_w.emplace_back(c, i);
    st.ops.push_back({false, c, i, Part::input});
  }
  void run_w(Stage& st) {
    auto [c, i] = st.pending_w.front();
    st.pending_w.pop_front();
    st.clock += c_.w;
    --st.held;  // what the backward kept for the weights' product goes with it
    st.ops.push_back({false, c, i, Part::weight});
  }

  const int S_;
  const int64_t m_;
  const ZeroBubbleCosts c_;
  const int64_t limit_;
  std::vector<Stage> stages_;
  std::vector<double> f_end_[2], b_end_[2];
};

}  // namespace

std::vector<std::vector<Op>> zero_bubble_v_orders(int S, int64_t m, const ZeroBubbleCosts& c, int64_t max_in_flight,
                                                  double* makespan) {
  BOOSTER_CHECK(S >= 1 && m >= 1 && max_in_flight >= 1, "zero bubble V schedule: ", S, " stages, ", m,
                " micro-batches, a memory limit of ", max_in_flight, " (each must be at least 1)");
  BOOSTER_CHECK(c.f > 0 && c.b > 0 && c.w > 0 && c.comm >= 0, "zero bubble V schedule: pass costs F ", c.f, " B ", c.b,
                " W ", c.w, " must be positive and the message cost ", c.comm, " not negative");
  Simulation sim(S, m, c, max_in_flight);
  sim.run();
  if (makespan) *makespan = sim.makespan();
  return sim.orders();
}

std::vector<PipelineSchedule::Op> ZeroBubbleVSchedule::order(int64_t m, bool forward_only) const {
  if (forward_only) {  // chunk 0 over every micro-batch, then chunk 1: the V's order of slots
    std::vector<Op> ops;
    for (int c = 0; c < 2; ++c)
      for (int64_t i = 0; i < m; ++i) ops.push_back({true, c, i});
    return ops;
  }
  const int S = sm_.num_stages();
  return zero_bubble_v_orders(S, m, costs_.value_or(ZeroBubbleCosts{}), 2 * int64_t(S))[size_t(sm_.stage())];
}

void ZeroBubbleVSchedule::after_step(const std::vector<PassTime>& passes) {
  if (costs_) return;  // measured once; a checkpoint's costs are kept
  // This stage's median F, B and W, then the stages' means (every stage the same figures,
  // so every stage simulates the same pipeline).
  std::vector<double> by_part[3];
  for (auto& p : passes) by_part[p.op.forward ? 0 : p.op.part == Part::input ? 1 : 2].push_back(p.seconds);
  double mine[3];
  for (int k = 0; k < 3; ++k) {
    auto& v = by_part[k];
    if (v.empty()) return;  // not a training step of this schedule
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    mine[k] = std::max(v[v.size() / 2], 1e-6);
  }
  // Gathered and summed in stage order on every stage: the same doubles everywhere.
  const auto all = dist::all_gather_bytes(std::string(reinterpret_cast<const char*>(mine), sizeof mine), sm_.group());
  double sum[3] = {0, 0, 0};
  for (const std::string& bytes : all) {
    double theirs[3];
    std::memcpy(theirs, bytes.data(), sizeof theirs);
    for (int k = 0; k < 3; ++k) sum[k] += theirs[k];
  }
  const double S = sm_.num_stages();
  costs_ = ZeroBubbleCosts{sum[0] / S, sum[1] / S, sum[2] / S, message_seconds()};
}

double ZeroBubbleVSchedule::message_seconds() const {
  const int S = sm_.num_stages(), s = sm_.stage();
  size_t bytes = last_step_stats().message_bytes;
  for (const std::string& theirs : dist::all_gather_bytes(std::to_string(bytes), sm_.group()))
    bytes = std::max(bytes, size_t(std::stoull(theirs)));
  double mine = 0;  // half the median round trip to the next stage (0 on the last stage)
  if (bytes > 0) {
    Tensor buf = Tensor::zeros({int64_t(bytes)}, DType::u8);
    constexpr int kRounds = 6;          // the first not timed
    constexpr int kTag = 5 * 4096 + 1;  // beside the p2p's tags (kind x 4096 + ..., p2p.cpp)
    // Pair (p, p + 1) after pair (p - 1, p) on every stage: no stage waits on one that waits.
    for (int pair = std::max(0, s - 1); pair <= s && pair + 1 < S; ++pair) {
      const bool lower = s == pair;
      const int peer = sm_.rank_of_stage(lower ? pair + 1 : pair);
      std::vector<double> trips;
      for (int r = 0; r < kRounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (lower) {
          dist::send(buf, peer, kTag, sm_.group());
          dist::recv(buf, peer, kTag, sm_.group());
        } else {
          dist::recv(buf, peer, kTag, sm_.group());
          dist::send(buf, peer, kTag, sm_.group());
        }
        if (r > 0) trips.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::nth_element(trips.begin(), trips.begin() + std::ptrdiff_t(trips.size() / 2), trips.end());
      if (lower) mine = trips[trips.size() / 2] / 2;
    }
  }
  // The pairs' mean, summed in stage order: the same double on every stage.
  double sum = 0;
  for (const std::string& theirs : dist::all_gather_bytes(std::string(reinterpret_cast<const char*>(&mine), sizeof mine),
                                                          sm_.group())) {
    double t;
    std::memcpy(&t, theirs.data(), sizeof t);
    sum += t;
  }
  return S > 1 ? sum / (S - 1) : 0.0;
}

}  // namespace booster::pipeline

namespace booster::pipeline {

namespace {
constexpr const char* kCostKeys[4] = {"zbv_cost_f", "zbv_cost_b", "zbv_cost_w", "zbv_cost_comm"};
}  // namespace

optim::OptimizerStateDict ZeroBubbleCostsState::with_costs(optim::OptimizerStateDict sd) const {
  if (const auto& c = schedule_.costs()) {
    const double v[4] = {c->f, c->b, c->w, c->comm};
    for (int k = 0; k < 4; ++k) sd.extra[kCostKeys[k]] = v[k];
  }
  return sd;
}

void ZeroBubbleCostsState::take_costs(const optim::OptimizerStateDict& sd) {
  double v[4];
  for (int k = 0; k < 4; ++k) {
    auto it = sd.extra.find(kCostKeys[k]);
    if (it == sd.extra.end()) return;
    v[k] = it->second;
    BOOSTER_CHECK_T(ValueError, std::isfinite(v[k]) && (k == 3 ? v[k] >= 0 : v[k] > 0), "optimizer checkpoint: ",
                    kCostKeys[k], " = ", v[k], " is not a zero bubble pass cost (positive seconds; the message's may be 0)");
  }
  schedule_.set_costs({v[0], v[1], v[2], v[3]});
}

void ZeroBubbleCostsState::load_state_dict(const optim::OptimizerStateDict& sd) {
  OptimizerDecorator::load_state_dict(sd);
  take_costs(sd);
}

void ZeroBubbleCostsState::load_local_state_dict(const optim::OptimizerStateDict& sd) {
  OptimizerDecorator::load_local_state_dict(sd);
  take_costs(sd);
}

}  // namespace booster::pipeline
