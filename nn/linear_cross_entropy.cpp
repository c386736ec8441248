// The head and its loss fused, a block of rows at a time (see linear_cross_entropy.h).
#include "nn/linear_cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/parallel.h"
#include "core/common/profiler.h"
#include "core/dist/collectives.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/cross_entropy_avx512.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster::nn {

RowsLoss cross_entropy_rows_in_place(float* x, const int64_t* y, int64_t n, int64_t c, const VocabSlice& slice,
                                     int64_t ignore_index) {
  const bool parallel = n * c > kGrain;
  Tensor mx = Tensor::empty({n});
  float* m = mx.data<float>();
#pragma omp parallel for if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    float v = -INFINITY;
    for (int64_t j = 0; j < c; ++j) v = std::max(v, x[i * c + j]);
    m[i] = v;
  }
  if (slice.tp) dist::all_reduce(mx, dist::ReduceOp::max, *slice.tp);
  Tensor sums = Tensor::zeros({2 * n});  // [sum of exponentials, the target's logit - max] a row
  float* s = sums.data<float>();
#pragma omp parallel for if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    double e = 0;
    for (int64_t j = 0; j < c; ++j) e += std::exp(double(x[i * c + j] - m[i]));
    s[2 * i] = float(e);
    const int64_t local = y[i] - slice.begin;
    s[2 * i + 1] = y[i] != ignore_index && local >= 0 && local < c ? x[i * c + local] - m[i] : 0.f;
  }
  if (slice.tp) dist::all_reduce(sums, dist::ReduceOp::sum, *slice.tp);
  RowsLoss out;
  double total = 0;
  int64_t counted = 0;
#pragma omp parallel for reduction(+ : total, counted) if (parallel)
  for (int64_t i = 0; i < n; ++i) {  // each row's loss, and its (softmax - one-hot) in place
    const bool counts = y[i] != ignore_index;
    if (counts) total += std::log(double(s[2 * i])) - double(s[2 * i + 1]), ++counted;
    const int64_t local = y[i] - slice.begin;
    const float inv = counts ? float(1.0 / double(s[2 * i])) : 0.f;
    for (int64_t j = 0; j < c; ++j) x[i * c + j] = counts ? std::exp(x[i * c + j] - m[i]) * inv : 0.f;
    if (counts && local >= 0 && local < c) x[i * c + local] -= 1.f;
  }
  out.total = total, out.counted = counted;
  return out;
}

namespace {

// One block's rows: the AVX-512 kernel where the vocabulary is whole, else the portable rows.
RowsLoss block_loss(float* x, const int64_t* y, int64_t n, int64_t c, const VocabSlice& slice, int64_t ignore_index,
                    Tensor& row_loss) {
  if (slice.tp || kernels::use_reference() || !kernels::avx512::cpu_ok()) return cross_entropy_rows_in_place(x, y, n, c, slice, ignore_index);
  if (!row_loss.defined() || row_loss.numel() < n) row_loss = Tensor::empty({n});
  float* l = row_loss.data<float>();
  RowsLoss out;
  out.counted = kernels::cross_entropy_rows(x, x, y, l, n, c, 0.0, ignore_index);
  for (int64_t i = 0; i < n; ++i) out.total += l[i];
  return out;
}

// The gradient the forward saved, times k: in place when the graph goes after this backward.
Tensor scaled(Tensor t, double k) {
  if (autograd::retaining_graph()) return scale(t, k);
  if (k != 1.0) kernels::scale_(t, k);
  return t;
}

}  // namespace

// hidden: [..., E], weight: [V, E], targets: [...] -> []
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const VocabSlice& slice,
                            const LinearCrossEntropyOptions& o) {
  ProfileScope prof_("lm head + loss");
  kernels::check_same_dtype("linear_cross_entropy", {&hidden, &weight});
  kernels::check_floating("linear_cross_entropy", hidden);
  BOOSTER_CHECK_T(ShapeError, weight.dim() == 2 && hidden.dim() >= 1 && hidden.size(-1) == weight.size(1),
                  "linear_cross_entropy: hidden ", shape_str(hidden.shape()), " does not fit weight ",
                  shape_str(weight.shape()), " (need [*, E] and [V, E])");
  const int64_t e = weight.size(1), c = weight.size(0), n = hidden.numel() / std::max<int64_t>(e, 1);
  BOOSTER_CHECK_T(ShapeError, targets.numel() == n, "linear_cross_entropy: targets ", shape_str(targets.shape()),
                  " do not match hidden ", shape_str(hidden.shape()), " (one target a row)");
  const int64_t vocab = slice.vocab_size > 0 ? slice.vocab_size : c;
  BOOSTER_CHECK(slice.begin >= 0 && slice.begin + c <= vocab, "linear_cross_entropy: weight rows ", slice.begin, "..",
                slice.begin + c, " are outside the vocabulary of ", vocab);
  const Tensor yc = as_indices(targets, "linear_cross_entropy: targets").contiguous();
  const int64_t* y = yc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    BOOSTER_CHECK_T(ValueError, y[i] == o.ignore_index || (y[i] >= 0 && y[i] < vocab), "linear_cross_entropy: target[", i,
                    "] = ", y[i], " is not a token id in [0, ", vocab, ")");
  const DType dt = hidden.dtype();
  const Tensor h = hidden.detach().contiguous().view({n, e}), w = weight.detach();
  const bool grads = autograd::needs_grad({hidden, weight});
  const bool gh = grads && hidden.requires_grad(), gw = grads && weight.requires_grad();
  const int64_t fit = std::max<int64_t>(64, (int64_t(128) << 20) / (4 * std::max<int64_t>(c, 1)) / 64 * 64);
  const int64_t rows = std::min(n, o.block_rows > 0 ? o.block_rows : fit);
  Tensor dh = gh ? Tensor::empty({n, e}, dt) : Tensor(), dw, row_loss;  // dw: f32 sums over the blocks
  RowsLoss sum;
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t b = std::min(rows, n - r0);
    const Tensor hb = h.narrow(0, r0, b);
    const Tensor logits = kernels::mm(hb, w.transpose(0, 1), Tensor(), {b, c});  // [b, E] x [E, V] -> [b, V]
    Tensor x = dt == DType::f32 ? logits : logits.to(DType::f32);
    const RowsLoss part = block_loss(x.data<float>(), y + r0, b, c, slice, o.ignore_index, row_loss);
    sum.total += part.total, sum.counted += part.counted;
    if (!gh && !gw) continue;
    const Tensor dl = dt == DType::f32 ? x : x.to(dt);  // (softmax - one-hot), unscaled
    if (gh) kernels::mm_into(dl, w, Tensor(), dh.narrow(0, r0, b));  // [b, V] x [V, E]
    if (gw) {
      Tensor p = kernels::mm_tn(dl, hb);  // [b, V]^T x [b, E] -> [V, E]
      if (!dw.defined()) dw = p.dtype() == DType::f32 ? p : p.to(DType::f32);
      else kernels::add_(dw, p);
    }
  }
  const double denom = double(sum.counted);  // no target counted: NaN, as cross_entropy
  Tensor loss = Tensor::scalar(sum.total / denom);
  const Shape h_shape = hidden.shape();
  const DType wdt = weight.dtype();
  return autograd::record("linear_cross_entropy", {hidden, weight}, loss,
                          [dh, dw, denom, h_shape, wdt](const std::vector<Tensor>& g) {
                            const double k = g[0].item() / denom;
                            Tensor gx = dh.defined() ? scaled(dh, k).view(h_shape) : Tensor();
                            Tensor gwt = dw.defined() ? scaled(dw, k) : Tensor();
                            return std::vector<Tensor>{gx, gwt.defined() && wdt != DType::f32 ? gwt.to(wdt) : gwt};
                          });
}

}  // namespace booster::nn
