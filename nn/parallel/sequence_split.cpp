// Sequence parallelism's token split (see sequence_split.h).
#include "nn/parallel/sequence_split.h"

#include "core/autograd/engine.h"
#include "core/common/check.h"
#include "core/dist/functional.h"
#include "core/kernels/ops.h"

namespace booster::nn {

Tensor scale_gradient(const Tensor& x, double factor) {
  if (factor == 1.0) return x;
  return autograd::record("ScaleGradient", {x}, x.detach(),
                          [factor](const std::vector<Tensor>& g) { return std::vector<Tensor>{scale(g[0], factor)}; });
}

namespace {

// x's 2 sp chunks along dim 1 in the given order: chunk order[i] lands in slot i (copied, no
// autograd history kept: the backward puts the gradient's slots back the other way).
Tensor chunks_in_order(const Tensor& x, const std::vector<int64_t>& order) {
  const int64_t c = x.size(1) / int64_t(order.size());
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  for (size_t i = 0; i < order.size(); ++i) y.narrow(1, int64_t(i) * c, c).copy_(x.detach().narrow(1, order[i] * c, c));
  return y;
}

// Zigzag order: the 2 sp chunks of the sequence as [0, 2sp-1, 1, 2sp-2, ...], so that a
// contiguous split gives rank r chunks r and 2sp-1-r; `undo` puts them back in order.
Tensor zigzag_order(const Tensor& x, int sp, bool undo) {
  std::vector<int64_t> forward(size_t(2 * sp)), inverse(size_t(2 * sp));
  for (int64_t i = 0; i < 2 * sp; ++i) {
    forward[size_t(i)] = i % 2 == 0 ? i / 2 : 2 * sp - 1 - i / 2;  // slot i holds this chunk
    inverse[size_t(forward[size_t(i)])] = i;
  }
  const auto& there = undo ? inverse : forward;
  const auto& back = undo ? forward : inverse;
  return autograd::record("ZigzagOrder", {x}, chunks_in_order(x, there), [back](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{chunks_in_order(g[0], back)};
  });
}

}  // namespace

Tensor SequenceSplit::split_tokens(const Tensor& x, const char* who, bool divisible) const {
  const int sp = group->size();
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 2, who, ": sequence parallelism splits [batch, tokens, ...], got ",
                  shape_str(x.shape()));
  BOOSTER_CHECK_T(ShapeError, !zigzag || x.size(1) % (2 * sp) == 0, who, ": ring_attn cuts the sequence into 2 x ",
                  "sp_size = ", 2 * sp, " equal chunks; a sequence of ", x.size(1),
                  " tokens does not; give sequences of a multiple of ", 2 * sp);
  BOOSTER_CHECK_T(ShapeError, !divisible || x.size(1) % sp == 0, who, ": a sequence of ", x.size(1),
                  " tokens does not split over the sequence-parallel group of ", sp, " ranks (",
                  data_parallel ? "all_to_all, sp_size" : "split_gather, tp_size", "); give sequences of a multiple of ", sp);
  BOOSTER_CHECK_T(ShapeError, x.size(1) >= sp, who, ": ", x.size(1), " tokens over ", sp,
                  " sequence-parallel ranks leave a rank without any");
  Tensor y = dist::split_forward_gather_backward(zigzag ? zigzag_order(x, sp, false) : x, 1, *group, true);
  return data_parallel ? scale_gradient(y, 1.0 / sp) : y;
}

Tensor SequenceSplit::gather_tokens(const Tensor& x, int64_t full) const {
  const int sp = group->size();
  Tensor y = data_parallel ? scale_gradient(x, double(sp)) : x;
  Tensor whole = dist::gather_forward_split_backward(y, 1, *group, full < 0 ? x.size(1) * sp : full);
  return zigzag ? zigzag_order(whole, sp, true) : whole;
}

}  // namespace booster::nn
