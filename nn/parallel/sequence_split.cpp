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

Tensor SequenceSplit::split_tokens(const Tensor& x, const char* who, bool divisible) const {
  const int sp = group->size();
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 2, who, ": sequence parallelism splits [batch, tokens, ...], got ",
                  shape_str(x.shape()));
  BOOSTER_CHECK_T(ShapeError, !divisible || x.size(1) % sp == 0, who, ": a sequence of ", x.size(1),
                  " tokens does not split over the sequence-parallel group of ", sp, " ranks (",
                  ulysses ? "all_to_all, sp_size" : "split_gather, tp_size", "); give sequences of a multiple of ", sp);
  BOOSTER_CHECK_T(ShapeError, x.size(1) >= sp, who, ": ", x.size(1), " tokens over ", sp,
                  " sequence-parallel ranks leave a rank without any");
  Tensor y = dist::split_forward_gather_backward(x, 1, *group, true);
  return ulysses ? scale_gradient(y, 1.0 / sp) : y;
}

Tensor SequenceSplit::gather_tokens(const Tensor& x, int64_t full) const {
  const int sp = group->size();
  Tensor y = ulysses ? scale_gradient(x, double(sp)) : x;
  return dist::gather_forward_split_backward(y, 1, *group, full < 0 ? x.size(1) * sp : full);
}

}  // namespace booster::nn
