// redistribute_rows: every rank ends with exactly the rows its new layout gives it (values
// named by their row), between the layouts Galvatron's layers use (tensor-parallel degrees
// 1, 2, 4 of the group, consecutive or strided), and the gradient goes back to every holder
// of a row in the old layout (the loss weights depend on the row only, as a
// tensor-parallel layer's input gradient is equal on its group).
#include <gtest/gtest.h>

#include "core/dist/collectives.h"
#include "core/dist/redistribute.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"

using namespace booster;
using namespace booster::dist;

namespace {

// Rows [lo, hi) of a batch whose row k holds k * 10 + column.
Tensor rows_of(int64_t lo, int64_t hi, int64_t cols) {
  std::vector<float> v;
  for (int64_t k = lo; k < hi; ++k)
    for (int64_t c = 0; c < cols; ++c) v.push_back(float(k * 10 + c));
  return Tensor::from_vector(v, {hi - lo, cols});
}

TEST(RedistributeRows, EveryRankGetsItsRowsAndEveryHolderItsGradient) {
  const auto& g = ProcessGroup::world();
  const int n = g.size(), me = g.rank();
  const int64_t batch = 4 * n, cols = 3;
  std::vector<RowLayout> layouts;
  for (int tp = 1; tp <= n; tp *= 2) {
    if (n % tp) continue;
    layouts.push_back(tp_row_layout(batch, n, tp, true));
    layouts.push_back(tp_row_layout(batch, n, tp, false));
  }
  for (size_t f = 0; f < layouts.size(); ++f)
    for (size_t t = 0; t < layouts.size(); ++t) {
      const auto [a, b] = layouts[f][size_t(me)];
      const auto [c, e] = layouts[t][size_t(me)];
      Tensor x = rows_of(a, b, cols).requires_grad_();
      Tensor y = redistribute_rows(x, layouts[f], layouts[t], g);
      EXPECT_EQ(y.to_vector(), rows_of(c, e, cols).to_vector()) << "layouts " << f << " -> " << t << ", rank " << me;
      sum(mul(y, rows_of(c, e, cols))).backward();  // d/dx = the row's own values
      EXPECT_EQ(x.grad().to_vector(), rows_of(a, b, cols).to_vector()) << "gradient " << f << " -> " << t;
    }
}

TEST(RedistributeRows, RefusesAnInputOfOtherRows) {
  const auto& g = ProcessGroup::world();
  const RowLayout l = tp_row_layout(2 * g.size(), g.size(), 1, true);
  Tensor x = Tensor::zeros({3, 2});
  EXPECT_THROW(redistribute_rows(x, l, tp_row_layout(2 * g.size(), g.size(), g.size(), true), g), ShapeError);
  EXPECT_THROW(tp_row_layout(3, 4, 1, true), ShapeError);
}

}  // namespace
