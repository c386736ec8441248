// Every scheduler's exact lr sequence against its formula written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

using namespace booster;
using namespace booster::optim;

namespace {

struct Fixture {
  Tensor w = Tensor::zeros({2}).requires_grad_();
  SGD opt{NamedParams{{"w", w}}, SGDOptions{0.1, 0.9}};
};

// The lr after construction and after each of n - 1 steps.
std::vector<double> sequence(LRScheduler& s, Optimizer& o, int n) {
  std::vector<double> out{o.param_groups()[0].lr()};
  for (int i = 1; i < n; ++i) {
    s.step();
    EXPECT_DOUBLE_EQ(s.get_last_lr()[0], o.param_groups()[0].lr());
    out.push_back(o.param_groups()[0].lr());
  }
  return out;
}

void expect_seq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "step " << i;
}

}  // namespace

TEST(LRScheduler, CosineAnnealingWarmup) {
  Fixture f;
  CosineAnnealingWarmupLR s(f.opt, /*total_steps=*/10, /*warmup_steps=*/3, /*eta_min=*/0.01);
  // e < 3: (e + 1) / 3 * 0.1;  e >= 3: 0.01 + (0.1 - 0.01) * (1 + cos(pi * (e - 3) / 7)) / 2
  std::vector<double> want;
  for (int e = 0; e < 12; ++e)
    want.push_back(e < 3 ? (e + 1) / 3.0 * 0.1 : 0.01 + 0.09 * (1 + std::cos(M_PI * (e - 3) / 7.0)) / 2);
  expect_seq(sequence(s, f.opt, 12), want);
  EXPECT_NEAR(want[3], 0.1, 1e-15);   // warm-up ends at the base rate
  EXPECT_NEAR(want[10], 0.01, 1e-15);  // and anneals to eta_min at total_steps
}

TEST(LRScheduler, CosineAnnealing) {
  Fixture f;
  CosineAnnealingLR s(f.opt, 4, 0.0);
  std::vector<double> want;  // 0.1 * (1 + cos(pi e / 4)) / 2
  for (int e = 0; e < 6; ++e) want.push_back(0.1 * (1 + std::cos(M_PI * e / 4.0)) / 2);
  expect_seq(sequence(s, f.opt, 6), want);
}

TEST(LRScheduler, LinearWarmup) {
  Fixture f;
  LinearWarmupLR s(f.opt, 10, 4);
  std::vector<double> want;  // e < 4: (e + 1) / 5 * 0.1; else (10 - e) / 6 * 0.1
  for (int e = 0; e < 11; ++e) want.push_back(e < 4 ? (e + 1) / 5.0 * 0.1 : (10 - e) / 6.0 * 0.1);
  expect_seq(sequence(s, f.opt, 11), want);
}

TEST(LRScheduler, MultiStep) {
  Fixture f;
  MultiStepLR s(f.opt, {5, 2}, 0.5);
  // 0.1 * 0.5^(milestones <= e): e = 0, 1 -> 0.1; 2..4 -> 0.05; 5.. -> 0.025
  expect_seq(sequence(s, f.opt, 7), {0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025});
}

TEST(LRScheduler, Exponential) {
  Fixture f;
  ExponentialLR s(f.opt, 0.9);
  expect_seq(sequence(s, f.opt, 4), {0.1, 0.09, 0.081, 0.0729});
}

TEST(LRScheduler, OneCycle) {
  Fixture f;
  OneCycleLR::Options o;
  o.pct_start = 0.25;
  OneCycleLR s(f.opt, 9, o);
  // initial = 0.1 / 25 = 0.004, min = 0.004 / 1e4; phase 1 ends at 0.25 * 9 - 1 = 1.25,
  // phase 2 at 8. cos anneal(a, b, p) = b + (a - b) / 2 * (1 + cos(pi p)).
  auto an = [](double a, double b, double p) { return b + (a - b) / 2 * (1 + std::cos(M_PI * p)); };
  std::vector<double> want, mom;
  for (int e = 0; e < 9; ++e) {
    if (e <= 1.25) want.push_back(an(0.004, 0.1, e / 1.25)), mom.push_back(an(0.95, 0.85, e / 1.25));
    else want.push_back(an(0.1, 0.004 / 1e4, (e - 1.25) / 6.75)), mom.push_back(an(0.85, 0.95, (e - 1.25) / 6.75));
  }
  std::vector<double> got_mom{f.opt.param_groups()[0].get("momentum")};
  std::vector<double> got{f.opt.param_groups()[0].lr()};
  for (int i = 1; i < 9; ++i) {
    s.step();
    got.push_back(f.opt.param_groups()[0].lr());
    got_mom.push_back(f.opt.param_groups()[0].get("momentum"));
  }
  expect_seq(got, want);
  expect_seq(got_mom, mom);
  s.step();  // step 9 == total is allowed; 10 is not
  EXPECT_THROW(s.step(), ValueError);
}

TEST(LRScheduler, StateRoundTrip) {
  Fixture a, b;
  CosineAnnealingWarmupLR sa(a.opt, 20, 5), sb(b.opt, 20, 5);
  for (int i = 0; i < 7; ++i) sa.step();
  sb.load_state_dict(sa.state_dict());
  EXPECT_EQ(b.opt.param_groups()[0].lr(), a.opt.param_groups()[0].lr());
  sa.step();
  sb.step();
  EXPECT_EQ(b.opt.param_groups()[0].lr(), a.opt.param_groups()[0].lr());
  SchedulerState wrong = sa.state_dict();
  wrong.type = "ExponentialLR";
  EXPECT_THROW(sb.load_state_dict(wrong), ValueError);
}
