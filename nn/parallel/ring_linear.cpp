// Sequence-parallel linears with their communication round the ring (see ring_linear.h).
#include "nn/parallel/ring_linear.h"

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/common/check.h"
#include "core/common/profiler.h"
#include "core/dist/ring_collectives.h"
#include "core/kernels/ops.h"

namespace booster::nn {
namespace {

constexpr int kShardTag = 7303, kSumTag = 7304;  // below dist::kUserTagLimit, on the tp group's communicator

// a [..., in] times the weight -> [..., out] (in_out: the weight is [in, out], else [out, in]).
Tensor product(const Tensor& a, const Tensor& w, bool in_out) {
  Shape os = a.shape();
  os.back() = in_out ? w.size(1) : w.size(0);
  return matmul(a.reshape({-1, a.size(-1)}), in_out ? w : w.transpose(0, 1)).view(os);
}
// The weight's gradient of product(a) from its output's gradient dy.
Tensor weight_grad(const Tensor& a, const Tensor& dy, bool in_out) {
  const Tensor a2 = a.reshape({-1, a.size(-1)}), d2 = dy.reshape({-1, dy.size(-1)}).to(a.dtype());
  return in_out ? matmul(a2.transpose(0, 1), d2) : matmul(d2.transpose(0, 1), a2);
}
// The input's gradient of product from dy: dy W^T.
Tensor input_grad(const Tensor& dy, const Tensor& w, bool in_out) {
  Shape s = dy.shape();
  s.back() = in_out ? w.size(0) : w.size(1);
  return matmul(dy.reshape({-1, dy.size(-1)}).to(w.dtype()), in_out ? w.transpose(0, 1) : w).view(s);
}

Tensor accumulate(const Tensor& sum_so_far, const Tensor& x) { return sum_so_far.defined() ? add(sum_so_far, x) : x; }

// Passes `mine` round the group: f(src, shard) for every rank's shard, this rank's first,
// the next one on the wire meanwhile (the shards have one shape).
template <typename F>
void around(const Tensor& mine, const dist::ProcessGroup& g, F&& f) {
  const int n = g.size(), r = g.rank();
  Tensor cur = mine.contiguous();
  for (int s = 0; s < n; ++s) {
    dist::RingShift next;
    if (s + 1 < n) next = dist::ring_shift(cur, g, kShardTag);
    f((r - s + n) % n, cur);
    next.wait();
    if (s + 1 < n) cur = next.incoming;
  }
}

// A ring reduce-scatter of products: this rank's shard of the sum over the group of
// partial(c) (shard c's product, the same shape for every c), in f32. The sum for shard c
// starts on rank c + 1 and goes round, each rank adding its partial, to end on rank c; each
// rank's next partial is multiplied while the sum it will add to travels.
template <typename F>
Tensor reduce_around(const dist::ProcessGroup& g, F&& partial) {
  const int n = g.size(), r = g.rank();
  Tensor acc = partial((r + n - 1) % n).to(DType::f32).contiguous();
  for (int s = 1; s < n; ++s) {
    dist::RingShift sum_so_far = dist::ring_shift(acc, g, kSumTag);
    const Tensor p = partial(((r - 1 - s) % n + n) % n).to(DType::f32);
    sum_so_far.wait();
    acc = add(sum_so_far.incoming, p);
  }
  return acc;
}

void check_input(const Tensor& x, int64_t in, const char* who) {
  BOOSTER_CHECK_T(ShapeError, x.dim() == 3 && x.size(-1) == in, who, ": input ", shape_str(x.shape()),
                  " must be [batch, tokens, ", in, "]");
}

}  // namespace

Tensor ring_gathered_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroup& tp,
                            bool in_out) {
  ProfileScope prof_("ring linear");
  const int64_t in = in_out ? weight.size(0) : weight.size(1), t = x.size(1), n = tp.size();
  check_input(x, in, "ring (sequence-overlapped) column-parallel linear");
  const Tensor xs = x.detach(), ws = weight.detach();
  Tensor y;
  {
    NoGradGuard ng;
    around(xs, tp, [&](int src, const Tensor& shard) {
      Tensor part = product(shard, ws, in_out);
      if (bias.defined()) part = add(part, bias.detach().to(part.dtype()));
      if (!y.defined()) y = Tensor::empty({x.size(0), t * n, part.size(-1)}, part.dtype());
      y.narrow(1, src * t, t).copy_(part);
    });
  }
  const bool has_bias = bias.defined();
  const DType bias_dtype = has_bias ? bias.dtype() : DType::f32;
  std::vector<Tensor> inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  const dist::ProcessGroup* g = &tp;
  return autograd::record("RingGatheredLinear", inputs, y, [xs, ws, g, t, in_out, has_bias, bias_dtype](const std::vector<Tensor>& gr) {
    NoGradGuard ng;
    const Tensor dy = gr[0].contiguous();  // [B, T, out]
    Tensor dw;
    around(xs, *g, [&](int src, const Tensor& shard) { dw = accumulate(dw, weight_grad(shard, dy.narrow(1, src * t, t), in_out)); });
    Tensor dx = reduce_around(*g, [&](int c) { return input_grad(dy.narrow(1, c * t, t), ws, in_out); });
    std::vector<Tensor> grads{dx.to(xs.dtype()), dw.to(ws.dtype())};
    if (has_bias) grads.push_back(sum(dy, {0, 1}).to(bias_dtype));
    return grads;
  });
}

Tensor ring_scattered_linear(const Tensor& x, const Tensor& weight, const dist::ProcessGroup& tp, bool in_out) {
  ProfileScope prof_("ring linear");
  const int64_t in = in_out ? weight.size(0) : weight.size(1), n = tp.size();
  check_input(x, in, "ring (sequence-overlapped) row-parallel linear");
  BOOSTER_CHECK_T(ShapeError, x.size(1) % n == 0, "ring (sequence-overlapped) row-parallel linear: ", x.size(1),
                  " tokens do not split evenly over the tensor-parallel group of ", n);
  const int64_t t = x.size(1) / n;
  const Tensor xs = x.detach(), ws = weight.detach();
  Tensor y;
  {
    NoGradGuard ng;
    DType dt = xs.dtype();
    y = reduce_around(tp, [&](int c) {
      Tensor p = product(xs.narrow(1, c * t, t), ws, in_out);
      dt = p.dtype();
      return p;
    });
    y = y.to(dt);
  }
  const dist::ProcessGroup* g = &tp;
  return autograd::record("RingScatteredLinear", {x, weight}, y, [xs, ws, g, t, in_out](const std::vector<Tensor>& gr) {
    NoGradGuard ng;
    Tensor dx = Tensor::empty(xs.shape(), xs.dtype()), dw;
    around(gr[0].contiguous(), *g, [&](int src, const Tensor& shard) {
      dx.narrow(1, src * t, t).copy_(input_grad(shard, ws, in_out));
      dw = accumulate(dw, weight_grad(xs.narrow(1, src * t, t), shard, in_out));
    });
    return std::vector<Tensor>{dx, dw.to(ws.dtype())};
  });
}

}  // namespace booster::nn
