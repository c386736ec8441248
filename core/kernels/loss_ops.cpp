// Cross entropy from logits, in f32 whatever the logits' dtype: class-index targets with
// ignore_index and label smoothing (torch.nn.functional.cross_entropy semantics), and
// soft targets (Mixup). Forward saves (p sum(q) - q); backward scales it by 1 / count. Class
// indices run on AVX-512 where the CPU has it (cross_entropy_avx512.h), without a target matrix.
#include <cmath>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/cross_entropy_avx512.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {
namespace kernels {
namespace {

// One row: p = softmax(x) written to prob, returns log-sum-exp. Acc is the accumulator
// type: double on the reference path, float on the fast one.
template <typename Acc>
Acc softmax_row(const float* x, float* prob, int64_t c) {
  Acc mx = -INFINITY;
  for (int64_t j = 0; j < c; ++j) mx = std::max<Acc>(mx, x[j]);
  Acc s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(Acc(x[j]) - mx);
  for (int64_t j = 0; j < c; ++j) prob[j] = float(std::exp(Acc(x[j]) - mx) / s);
  return mx + std::log(s);
}

// Loss of every row and the target distribution q (smoothed) into `q`; returns the
// number of rows that count. Hard targets fill q from the class index.
template <typename Acc>
int64_t ce_rows(const float* x, float* prob, float* q, const int64_t* target, const float* soft, float* row_loss,
                int64_t n, int64_t c, double smoothing, int64_t ignore_index, bool parallel) {
  int64_t counted = 0;
#pragma omp parallel for reduction(+ : counted) if (parallel && n * c > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    float* qi = q + i * c;
    if (target && target[i] == ignore_index) {
      for (int64_t j = 0; j < c; ++j) qi[j] = 0.f, prob[i * c + j] = 0.f;
      row_loss[i] = 0.f;
      continue;
    }
    const Acc lse = softmax_row<Acc>(x + i * c, prob + i * c, c);
    for (int64_t j = 0; j < c; ++j) {
      const Acc base = target ? Acc(j == target[i]) : Acc(soft[i * c + j]);
      qi[j] = float(base * (1 - smoothing) + smoothing / double(c));
    }
    Acc loss = 0, qsum = 0;
    for (int64_t j = 0; j < c; ++j) {
      loss += Acc(qi[j]) * (lse - Acc(x[i * c + j]));
      qsum += qi[j];
    }
    // d loss / d x_j = p_j * sum(q) - q_j; fold sum(q) into q's scale for backward.
    for (int64_t j = 0; j < c; ++j) prob[i * c + j] = float(Acc(prob[i * c + j]) * qsum);
    row_loss[i] = float(loss);
    ++counted;
  }
  return counted;
}

Tensor cross_entropy_impl(const char* op, const Tensor& logits, const Tensor& target, const Tensor& soft,
                          double smoothing, int64_t ignore_index) {
  ProfileScope prof_("cross_entropy");
  check_floating(op, logits);
  BOOSTER_CHECK_T(ShapeError, logits.dim() == 2, op, ": logits must be [N, C], got ", shape_str(logits.shape()));
  BOOSTER_CHECK(smoothing >= 0.0 && smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ", smoothing);
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor x = f32_contig(logits);
  Tensor tgt, sft;
  if (target.defined()) {
    tgt = as_indices(target, std::string(op) + ": target");
    BOOSTER_CHECK_T(ShapeError, target.shape() == Shape{n}, op, ": target ", shape_str(target.shape()),
                    " does not match logits ", shape_str(logits.shape()), " (need [N])");
    const int64_t* t = tgt.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      BOOSTER_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < c), op, ": target[", i, "] = ", t[i],
                    " is not a class index in [0, ", c, ")");
  } else {
    BOOSTER_CHECK_T(ShapeError, soft.shape() == logits.shape(), op, ": soft target ", shape_str(soft.shape()),
                    " does not match logits ", shape_str(logits.shape()));
    sft = f32_contig(soft);
  }
  Tensor grad_base = Tensor::empty({n, c}), rows = Tensor::empty({n});
  const bool ref = use_reference();
  const int64_t* tp = tgt.defined() ? tgt.data<int64_t>() : nullptr;
  const float* sp = sft.defined() ? sft.data<float>() : nullptr;
  int64_t counted = 0;
  if (tp && !ref && avx512::cpu_ok()) {  // class indices: one pass, no [N, C] target matrix
    counted = cross_entropy_rows(x.data<float>(), grad_base.data<float>(), tp, rows.data<float>(), n, c, smoothing,
                                 ignore_index);
  } else {
    Tensor q = Tensor::empty({n, c});
    counted = ref ? ce_rows<double>(x.data<float>(), grad_base.data<float>(), q.data<float>(), tp, sp, rows.data<float>(),
                                    n, c, smoothing, ignore_index, false)
                  : ce_rows<float>(x.data<float>(), grad_base.data<float>(), q.data<float>(), tp, sp, rows.data<float>(),
                                   n, c, smoothing, ignore_index, true);
    // grad_base = p * sum(q) - q, per row
    float* gb = grad_base.data<float>();
    const float* qp = q.data<float>();
#pragma omp parallel for simd if (!ref && n * c > kGrain)
    for (int64_t i = 0; i < n * c; ++i) gb[i] -= qp[i];
  }
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += rows.data<float>()[i];
  const double denom = double(counted);  // 0 rows counted -> NaN, as PyTorch
  Tensor loss = Tensor::scalar(total / denom);
  const DType dt = logits.dtype();
  return autograd::record(op, {logits}, loss, [grad_base, denom, dt](const std::vector<Tensor>& g) {
    const double k = g[0].item() / denom;
    if (autograd::retaining_graph()) return std::vector<Tensor>{scale(grad_base, k).to(dt)};
    // The graph goes after this backward: scaled in place, no second [N, C] (a language
    // model's head: 823 MB at 4 x 1,024 tokens of GPT-2, and its pages' first touch).
    Tensor gb = grad_base;
    scale_(gb, k);
    return std::vector<Tensor>{gb.to(dt)};
  });
}

}  // namespace
}  // namespace kernels

// logits: [N, C], target: [N] -> []
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& opts) {
  return kernels::cross_entropy_impl("cross_entropy", logits, target, Tensor(), opts.label_smoothing, opts.ignore_index);
}

// logits: [N, C], target_probs: [N, C] -> []
Tensor cross_entropy_soft(const Tensor& logits, const Tensor& target_probs, double label_smoothing) {
  return kernels::cross_entropy_impl("cross_entropy_soft", logits, Tensor(), target_probs, label_smoothing, INT64_MIN);
}

}  // namespace booster
