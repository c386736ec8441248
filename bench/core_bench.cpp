// Core op benchmark. Linear forward+backward at ViT-B/16 shapes (batch 16: M = 3152,
// K = 768, N = 768 / 3072) against the raw oneDNN matmul ceiling, the two timed
// alternately inside each iteration so a noisy shared machine hits both alike; counters
// report both GFLOP/s and their ratio. Plus the per-op overhead on tiny tensors.
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>

#include "core/autograd/engine.h"
#include "core/kernels/blocked_pack.h"
#include "core/kernels/dnnl_util.h"
#include "core/kernels/matmul_tn_avx512.h"
#include "core/kernels/tile_gemm.h"
#include "ceiling.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

Tensor random_tensor(const Shape& s, DType dt, uint64_t seed) {
  // Filled with values: never-written pages map to one zero page and flatter a matmul.
  Tensor t = Tensor::empty(s);
  Generator(seed).uniform_(t, -0.5, 0.5);
  return t.to(dt);
}

// Runs `run` and the ceiling alternately in every iteration (a noisy shared machine slows
// both alike; one warm-up call of each first) and reports GFLOPs (`flop` per run),
// ceiling_GFLOPs (`ceiling_flop` per ceiling run) and their ratio. Skips the benchmark
// where oneDNN has no matmul kernel for dt.
void time_beside_ceiling(benchmark::State& state, bench::RawMatmul& ceiling, DType dt, double flop, double ceiling_flop,
                         const std::function<void()>& run) {
  if (!ceiling.ok()) {
    state.SkipWithError((std::string("oneDNN has no ") + dtype_name(dt) + " matmul kernel on this CPU").c_str());
    return;
  }
  run();
  ceiling.run_seconds();
  double op_s = 0, ceil_s = 0;
  for (auto _ : state) {
    ceil_s += ceiling.run_seconds();
    const auto t0 = Clock::now();
    run();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    op_s += s;
    state.SetIterationTime(s);
  }
  const double iters = double(state.iterations());
  const double op_gflops = flop * iters / op_s / 1e9, ceil_gflops = ceiling_flop * iters / ceil_s / 1e9;
  state.counters["GFLOPs"] = op_gflops;
  state.counters["ceiling_GFLOPs"] = ceil_gflops;
  state.counters["ratio"] = op_gflops / ceil_gflops;
}

void BM_LinearFwdBwd(benchmark::State& state, DType dt) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  bench::RawMatmul ceiling(m, k, n, dt);
  Tensor x = random_tensor({m, k}, dt, 3).requires_grad_();
  Tensor w = random_tensor({n, k}, dt, 4).requires_grad_();
  Tensor b = random_tensor({n}, dt, 5).requires_grad_();
  Tensor dy = random_tensor({m, n}, dt, 6);
  const double flop = 2.0 * double(m) * double(k) * double(n);
  time_beside_ceiling(state, ceiling, dt, 3 * flop, flop, [&] {
    x.set_grad({});
    w.set_grad({});
    b.set_grad({});
    linear(x, w, b).backward(dy);
  });
  state.SetLabel(ceiling.impl());
}

// One of a linear's three matmuls alone (0: y = x W^T + b, 1: dx = dy W, 2: dW = dy^T x), as
// linear and its backward call them, against the ceiling of the same size: where a linear's
// time goes beyond the matmul it is.
void BM_LinearPart(benchmark::State& state, DType dt) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2), part = state.range(3);
  // arg 4: operand sets taken in turn (1: hot in the caches; 16: operands and results, each
  // result held until its set comes round again, come from memory, as in a training step)
  const int64_t sets = state.range(4);
  bench::RawMatmul ceiling(m, k, n, dt);
  std::vector<Tensor> xs, ws, bs, dys;
  std::vector<Tensor> results(static_cast<size_t>(sets));
  for (int64_t i = 0; i < sets; ++i) {
    const uint64_t seed = uint64_t(10 * i);
    xs.push_back(random_tensor({m, k}, dt, seed + 3));
    ws.push_back(random_tensor({n, k}, dt, seed + 4));
    bs.push_back(random_tensor({1, n}, dt, seed + 5));
    dys.push_back(random_tensor({m, n}, dt, seed + 6));
  }
  size_t turn = 0;
  auto product = [&] {
    const size_t j = turn++ % size_t(sets);
    results[j] = Tensor();
    if (part == 0) results[j] = kernels::mm(xs[j], ws[j].transpose(0, 1), bs[j], {m, n});
    else if (part == 1) results[j] = kernels::mm(dys[j], ws[j], Tensor(), {m, k});
    else results[j] = kernels::mm_tn(dys[j], xs[j]);  // the way linear runs it (its first call times the ways)
  };
  const double flop = 2.0 * double(m) * double(k) * double(n);
  time_beside_ceiling(state, ceiling, dt, flop, flop, product);
  static const char* names[] = {"fwd x W^T + b", "dx = dy W", "dW = dy^T x"};
  state.SetLabel(std::string(names[part]) + (sets > 1 ? ", from memory" : ""));
}

// A bf16 linear product on the own tiles (matmul_tn_avx512.h) against oneDNN's, alternated in
// every iteration on operands from memory (16 sets taken in turn, each product on its own):
// counter "speedup" = oneDNN's time / the own one's. Args: M, x's width, dy's width (dW = dy^T x).
void BM_OwnBf16Product(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  if (!kernels::tiles::bf16_ok()) {
    state.SkipWithError("the own bf16 tiles do not run on this CPU (AVX512-BF16 without AMX)");
    return;
  }
  constexpr int64_t kSets = 16;
  std::vector<Tensor> xs, dys, results(kSets);
  for (int64_t i = 0; i < kSets; ++i) {
    xs.push_back(random_tensor({m, k}, DType::bf16, uint64_t(10 * i + 3)));
    dys.push_back(random_tensor({m, n}, DType::bf16, uint64_t(10 * i + 6)));
  }
  auto onednn = [&](size_t j) {
    return kernels::mm(dys[j].transpose(0, 1), xs[j], Tensor(), {n, k}, kernels::RightOperand::activation);
  };
  auto own = [&](size_t j) { return kernels::mm_tn_bf16_avx512(dys[j], xs[j]); };
  double own_s = 0, onednn_s = 0;
  size_t turn = 0;
  for (auto _ : state) {
    const size_t a = turn++ % kSets, b = turn++ % kSets;
    results[a] = Tensor();
    auto t0 = Clock::now();
    results[a] = onednn(a);
    onednn_s += std::chrono::duration<double>(Clock::now() - t0).count();
    results[b] = Tensor();
    t0 = Clock::now();
    results[b] = own(b);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    own_s += s;
    state.SetIterationTime(s);
  }
  const double flop = 2.0 * double(m) * double(k) * double(n) * double(state.iterations());
  state.counters["GFLOPs"] = flop / own_s / 1e9;
  state.counters["onednn_GFLOPs"] = flop / onednn_s / 1e9;
  state.counters["speedup"] = onednn_s / own_s;
  state.SetLabel("dW = dy^T x, from memory");
}

// Attention at ViT-B/16 shapes (batch 8, 12 heads of 64, 197 tokens; q, k, v permuted views of
// [B, T, h*d] projections, as the ViT makes them): forward (arg 0) or backward (arg 1) of
// scaled_dot_product_attention beside the ceiling of the MLP's first matmul.
void BM_Attention(benchmark::State& state, DType dt) {
  const int64_t b = 8, h = 12, t = 197, d = 64, bwd = state.range(0);
  bench::RawMatmul ceiling(b * t, h * d, 4 * h * d, dt);
  auto leaf = [&](uint64_t seed) {
    Tensor x = random_tensor({b, t, h * d}, dt, seed);
    x.requires_grad_();
    return x;
  };
  auto heads = [&](const Tensor& x) { return x.view({b, t, h, d}).permute({0, 2, 1, 3}); };
  Tensor qx = leaf(1), kx = leaf(2), vx = leaf(3);
  Tensor dout = random_tensor({b, h, t, d}, dt, 4);
  // forward: two products of 2 b h t t d; backward: four more
  const double flop = (bwd ? 6.0 : 2.0) * 2.0 * double(b * h * t * t * d);
  const double ceiling_flop = 2.0 * double(b * t) * double(h * d) * double(4 * h * d);
  time_beside_ceiling(state, ceiling, dt, flop, ceiling_flop, [&] {
    Tensor out = scaled_dot_product_attention(heads(qx), heads(kx), heads(vx));
    if (!bwd) return;
    for (Tensor* x : {&qx, &kx, &vx}) x->set_grad(Tensor());
    autograd::backward({out}, {dout});
  });
  state.SetLabel(bwd ? "forward + backward" : "forward");
}

// Dispatch, cache lookup and graph bookkeeping of one small op.
void BM_TinyOpOverhead(benchmark::State& state) {
  const bool grad = state.range(0);
  Tensor a = random_tensor({4}, DType::f32, 1), b = random_tensor({4}, DType::f32, 2);
  if (grad) a.requires_grad_();
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  state.SetLabel(grad ? "add [4], records graph" : "add [4], no graph");
}

void BM_TinyLinearOverhead(benchmark::State& state) {
  Tensor x = random_tensor({2, 8}, DType::f32, 1), w = random_tensor({8, 8}, DType::f32, 2);
  for (auto _ : state) benchmark::DoNotOptimize(linear(x, w));
  state.SetLabel("linear [2,8]x[8,8] (tiny-problem loop)");
}

}  // namespace

BENCHMARK_CAPTURE(BM_LinearFwdBwd, f32, DType::f32)
    ->Args({3152, 768, 768})
    ->Args({3152, 768, 3072})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LinearFwdBwd, bf16, DType::bf16)
    ->Args({3152, 768, 768})
    ->Args({3152, 768, 3072})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// ViT-B/16 and ViT-Ti/16 at batch 8 (M = 1576): the attention projections and the MLP's two
// linears; ViT-Ti's also from memory, where its step finds them (its activations, 150 MB,
// outgrow the caches: in-step its linears ran at the "from memory" speeds, 20-40 % below the
// hot ones).
#define LINEAR_PARTS(dt)                                                                                  \
  BENCHMARK_CAPTURE(BM_LinearPart, dt, DType::dt)                                                         \
      ->ArgsProduct({{1576}, {768}, {768, 3072}, {0, 1, 2}, {1}})                                         \
      ->ArgsProduct({{1576}, {3072}, {768}, {0, 1, 2}, {1}})                                              \
      ->ArgsProduct({{1576}, {192}, {192, 576, 768}, {0, 1, 2}, {1, 16}})                                 \
      ->ArgsProduct({{1576}, {768}, {192}, {0, 1, 2}, {1, 16}})                                           \
      ->UseManualTime()                                                                                   \
      ->Unit(benchmark::kMillisecond)
LINEAR_PARTS(f32);
LINEAR_PARTS(bf16);
// ViT-Ti's and ViT-B's weight gradients at batch 8 (M = 1576).
BENCHMARK(BM_OwnBf16Product)
    ->ArgsProduct({{1576}, {192}, {192, 576, 768}})
    ->Args({1576, 768, 192})
    ->Args({1576, 768, 768})
    ->Args({1576, 768, 3072})
    ->Args({1576, 3072, 768})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attention, f32, DType::f32)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Attention, bf16, DType::bf16)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
// GELU forward (arg 0) or forward + backward (arg 1) at ViT-B's MLP ([8, 197, 3072]), the
// input rotating through 6 tensors so that it comes from memory, as in a training step.
void BM_Gelu(benchmark::State& state, DType dt) {
  std::vector<Tensor> xs;
  for (uint64_t i = 0; i < 6; ++i) xs.push_back(random_tensor({8, 197, 3072}, dt, 10 + i).requires_grad_());
  Tensor dy = random_tensor({8, 197, 3072}, dt, 20);
  size_t i = 0;
  for (auto _ : state) {
    Tensor& x = xs[i++ % xs.size()];
    x.set_grad(Tensor());
    Tensor y = gelu(x);
    if (state.range(0)) y.backward(dy);
    benchmark::DoNotOptimize(y);
  }
  state.SetLabel(state.range(0) ? "forward + backward" : "forward");
}
BENCHMARK_CAPTURE(BM_Gelu, f32, DType::f32)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gelu, bf16, DType::bf16)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// LayerNorm forward (arg 1 = 0) or forward + backward (1) at ViT-B's ([8, 197, 768], arg 0 =
// 768) or ViT-Ti's ([8, 197, 192]) hidden size, the input rotating through 8 tensors as
// BM_Gelu's does; bytes count the input read and the output written once each way.
void BM_LayerNorm(benchmark::State& state, DType dt) {
  const int64_t c = state.range(0);
  std::vector<Tensor> xs;
  for (uint64_t i = 0; i < 8; ++i) xs.push_back(random_tensor({8, 197, c}, dt, 40 + i).requires_grad_());
  Tensor w = random_tensor({c}, dt, 50).requires_grad_(), b = random_tensor({c}, dt, 51).requires_grad_();
  Tensor dy = random_tensor({8, 197, c}, dt, 52);
  size_t i = 0;
  for (auto _ : state) {
    Tensor& x = xs[i++ % xs.size()];
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    Tensor y = layer_norm(x, w, b, 1e-12);
    if (state.range(1)) y.backward(dy);
    benchmark::DoNotOptimize(y);
  }
  const int64_t passes = state.range(1) ? 5 : 2;  // forward: x, y; backward: x, dy, dx
  state.SetBytesProcessed(int64_t(state.iterations()) * passes * xs[0].numel() * int64_t(dtype_size(dt)));
  state.SetLabel(state.range(1) ? "forward + backward" : "forward");
}
BENCHMARK_CAPTURE(BM_LayerNorm, f32, DType::f32)->ArgsProduct({{768, 192}, {0, 1}});
BENCHMARK_CAPTURE(BM_LayerNorm, bf16, DType::bf16)->ArgsProduct({{768, 192}, {0, 1}});

// A transposed copy: contiguous() of a [3072, 768] view of a [768, 3072] tensor, as mm_tn's
// transposed way turns the fc2 weight gradient of ViT-B around.
void BM_TransposedCopy(benchmark::State& state, DType dt) {
  Tensor x = random_tensor({3072, 768}, dt, 1);
  for (auto _ : state) benchmark::DoNotOptimize(x.transpose(0, 1).contiguous());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * x.numel() * dtype_size(dt)));
}
BENCHMARK_CAPTURE(BM_TransposedCopy, f32, DType::f32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TransposedCopy, bf16, DType::bf16)->Unit(benchmark::kMillisecond);

// A weight packed for a matmul ([768, 3072] into BA16a64b / BA16a64b2a): as the forward
// reads it (W^T, column-major, arg 1 = 1) or as the backward's dx does (W, row-major), by
// oneDNN's reorder (arg 2 = 0) or by the own packing (1). The weight rotates through 8
// copies (38-75 MB), so that it comes from memory as in a training step.
void BM_WeightPack(benchmark::State& state, DType dt) {
  using tag = dnnl::memory::format_tag;
  const bool transposed = state.range(0) != 0, own = state.range(1) != 0;
  std::vector<Tensor> ws;
  for (uint64_t i = 0; i < 8; ++i) ws.push_back(random_tensor({3072, 768}, dt, 30 + i));
  const int64_t k = transposed ? 768 : 3072, n = transposed ? 3072 : 768;
  const dnnl::memory::desc md({k, n}, kernels::dnnl_type(dt), dt == DType::f32 ? tag::BA16a64b : tag::BA16a64b2a);
  Tensor out = Tensor::empty({int64_t(md.get_size())}, DType::u8);
  size_t i = 0;
  for (auto _ : state) {
    const Tensor src = transposed ? ws[i++ % ws.size()].transpose(0, 1) : ws[i++ % ws.size()];
    if (own) {
      kernels::pack_blocked(src, md, out.raw_data());
    } else {
      dnnl::memory from(kernels::md_of(src), kernels::cpu_engine(), src.raw_data());
      dnnl::memory to(md, kernels::cpu_engine(), out.raw_data());
      dnnl::reorder(from, to).execute(kernels::cpu_stream(), from, to);
      kernels::cpu_stream().wait();
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * ws[0].numel() * dtype_size(dt)));
  state.SetLabel(std::string(transposed ? "W^T (forward)" : "W (backward dx)") + (own ? ", own" : ", oneDNN"));
}
BENCHMARK_CAPTURE(BM_WeightPack, f32, DType::f32)->ArgsProduct({{1, 0}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_WeightPack, bf16, DType::bf16)->ArgsProduct({{1, 0}, {0, 1}})->Unit(benchmark::kMillisecond);

// A bias gradient: the column sums of dy [1576, N], read where it lies.
void BM_BiasGrad(benchmark::State& state, DType dt) {
  Tensor dy = random_tensor({1576, state.range(0)}, dt, 1);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::sum_dims(dy, {0}, false));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(dy.numel() * dtype_size(dt)));
}
BENCHMARK_CAPTURE(BM_BiasGrad, f32, DType::f32)->Arg(768)->Arg(3072);
BENCHMARK_CAPTURE(BM_BiasGrad, bf16, DType::bf16)->Arg(768)->Arg(3072);
BENCHMARK(BM_TinyOpOverhead)->Arg(0)->Arg(1);
BENCHMARK(BM_TinyLinearOverhead);

BENCHMARK_MAIN();
