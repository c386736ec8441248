// Optimizer step bandwidth on ViT-B/16 parameters (86 M) against a plain streaming copy
// of the same bytes, timed alternately in each iteration. Bytes counted per parameter:
// AdamW reads p, g, m, v and writes p, m, v (28 B); SGD with momentum reads p, g, buf and
// writes p, buf (20 B); the copy reads and writes once (8 B per float). Also the mixed-
// precision step of bf16 training (bf16 gradients in, bf16 compute copies out).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "core/autograd/grad_mode.h"
#include "core/common/parallel.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<nn::ViTForImageClassification> vit_base() {
  static std::shared_ptr<nn::ViTForImageClassification> m = [] {
    nn::ViTConfig c = nn::ViTConfig::preset("vit-base");
    c.num_labels = 3;
    nn::SkipInitGuard skip;  // values do not matter for bandwidth; fill them once below
    auto model = std::make_shared<nn::ViTForImageClassification>(c);
    Generator g(1);
    NoGradGuard ng;
    for (auto& p : model->parameters()) {
      Tensor t = p;
      g.uniform_(t, -0.1, 0.1);
      Tensor grad = Tensor::empty(t.shape());
      g.uniform_(grad, -1e-3, 1e-3);
      t.set_grad(grad);
    }
    return model;
  }();
  return m;
}

double copy_seconds(const Tensor& src, Tensor& dst) {
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  auto t0 = Clock::now();
  parallel_for(src.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    std::memcpy(d + b, s + b, size_t(e - b) * sizeof(float));
  });
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Times `step` (state allocated by a first call), each iteration after a streaming copy of
// as many bytes, and reports both bandwidths.
void time_against_copy(benchmark::State& state, int64_t params, double bytes_per_param,
                       const std::function<void()>& step) {
  const int64_t copy_floats = int64_t(bytes_per_param * double(params) / 8);
  Tensor src = Tensor::ones({copy_floats}), dst = Tensor::zeros({copy_floats});
  step();  // allocate state
  double step_s = 0, copy_s = 0;
  for (auto _ : state) {
    copy_s += copy_seconds(src, dst);
    auto t0 = Clock::now();
    step();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    step_s += s;
    state.SetIterationTime(s);
  }
  const double it = double(state.iterations()), bytes = bytes_per_param * double(params);
  state.counters["params_M"] = double(params) / 1e6;
  state.counters["step_GBps"] = bytes * it / step_s / 1e9;
  state.counters["copy_GBps"] = bytes * it / copy_s / 1e9;
  state.counters["ratio"] = copy_s / step_s;
}

template <typename MakeOpt>
void BM_OptimizerStep(benchmark::State& state, MakeOpt make, double bytes_per_param) {
  auto model = vit_base();
  auto opt = make(model->named_parameters());
  int64_t n = 0;
  for (auto& p : model->parameters()) n += p.numel();
  time_against_copy(state, n, bytes_per_param, [&] { opt->step(); });
}

// The mixed-precision step bf16 training takes (step_on): f32 values and moments, bf16
// gradients, and the bf16 compute copies written in the same pass. Bytes per parameter: p,
// m, v read and written (24), g read (2), the copy written (2): 28 B, as AdamW's.
void BM_OptimizerStepBf16(benchmark::State& state) {
  auto model = vit_base();
  auto opt = std::make_unique<optim::HybridAdam>(model->named_parameters());
  std::vector<optim::UpdateTarget> targets;
  int64_t n = 0;
  for (auto& [name, p] : model->named_parameters()) {
    targets.push_back({name, p, p.grad().to(DType::bf16), Tensor::empty(p.shape(), DType::bf16)});
    n += p.numel();
  }
  time_against_copy(state, n, 28.0, [&] { opt->step_on(targets, 1.0); });
}

}  // namespace

BENCHMARK(BM_OptimizerStepBf16)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_OptimizerStep, AdamW,
                  [](const optim::NamedParams& p) { return std::make_unique<optim::AdamW>(p); }, 28.0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_OptimizerStep, HybridAdam,
                  [](const optim::NamedParams& p) { return std::make_unique<optim::HybridAdam>(p); }, 28.0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_OptimizerStep, SGD_momentum,
                  [](const optim::NamedParams& p) {
                    return std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1, 0.9});
                  },
                  20.0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
