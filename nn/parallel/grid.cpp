// Tensor-parallel grids (see grid.h). Coordinates come from the rank in the tp group:
// 2D / 2.5D t = c + q r + q^2 k (column c innermost, then row r, then depth k); 3D
// t = j + d i + d^2 k. Every group is an MPI split of the tp group, keyed so that its
// group rank is the block index the layouts promise.
#include "nn/parallel/grid.h"

#include <cmath>

#include "core/common/check.h"

namespace booster::nn {

namespace {
// The integer r with r^p == n, or 0.
int exact_root(int n, int p) {
  const int r = int(std::lround(std::pow(double(n), 1.0 / p)));
  for (int c = std::max(1, r - 1); c <= r + 1; ++c) {
    int v = 1;
    for (int i = 0; i < p; ++i) v *= c;
    if (v == n) return c;
  }
  return 0;
}
}  // namespace

int TensorGrid::edge(const std::string& mode, int n, int depth) {
  if (mode == "3d") {
    BOOSTER_CHECK(depth == 1, "tp_mode 3d has no depth; tp_depth ", depth, " needs tp_mode = \"2.5d\"");
    const int d = exact_root(n, 3);
    BOOSTER_CHECK(d > 0, "tp_mode 3d: tp_size ", n, " is not d^3 for an integer d (8, 27, 64, ...)");
    return d;
  }
  BOOSTER_CHECK(mode == "2d" || mode == "2.5d", "tp_mode must be 1d, 2d, 2.5d or 3d, got '", mode, "'");
  BOOSTER_CHECK(depth >= 1, "tp_mode ", mode, ": tp_depth must be >= 1, got ", depth);
  BOOSTER_CHECK(mode == "2.5d" || depth == 1, "tp_mode 2d has no depth; tp_depth ", depth, " needs tp_mode = \"2.5d\"");
  const int q = n % depth == 0 ? exact_root(n / depth, 2) : 0;
  if (mode == "2d") BOOSTER_CHECK(q > 0, "tp_mode 2d: tp_size ", n, " is not q^2 for an integer q (4, 9, 16, ...)");
  BOOSTER_CHECK(q > 0, "tp_mode 2.5d: tp_size ", n, " is not q^2 x tp_depth ", depth, " for an integer q (e.g. 8 = 2^2 x 2)");
  return q;
}

TensorGrid::TensorGrid(const dist::ProcessGroup& tp, const std::string& mode, int depth) : mode_(mode) {
  const int n = tp.size(), t = tp.rank();
  q_ = edge(mode, n, depth);
  const auto split = [&](int color, int key, const std::string& name) {
    return dist::split_group(tp, color, key, "tp_" + name);
  };
  if (mode == "2d" || mode == "2.5d") {
    depth_ = depth;
    const int c = t % q_, r = (t / q_) % q_, k = t / (q_ * q_);
    g0_ = split(r + q_ * k, c, "row");
    g1_ = split(c + q_ * k, r, "col");
    g2_ = split(c + q_ * r, k, "dep");
    g3_ = split(c, k * q_ + r, "rows");
    a_ = {g0_.get(), g3_.get()};
    lin_a_.in = lin_a_.out = a_;
    lin_a_.gather_x = g0_.get();
    lin_a_.x_dim = -1;
    lin_a_.gather_w = g1_.get();
    lin_a_.depth = depth > 1 ? g2_.get() : nullptr;
    lin_a_.out_block = c, lin_a_.out_blocks = q_, lin_a_.in_block = r, lin_a_.in_blocks = q_;
    lin_b_ = lin_a_;
  } else {
    const int d = q_, j = t % d, i = (t / d) % d, k = t / (d * d);
    g0_ = split(j + d * k, i, "3d_weight");   // i varies
    g1_ = split(i + d * k, j, "3d_input");    // j varies
    g2_ = split(j + d * i, k, "3d_output");   // k varies
    g3_ = split(k, i * d + j, "3d_input_x_weight");
    g4_ = split(j, i * d + k, "3d_output_x_weight");
    a_ = {g2_.get(), g3_.get()};
    const GridLayout b{g1_.get(), g4_.get()};  // the layout a linear from a_ writes (and the next reads)
    lin_a_.in = a_, lin_a_.out = b;
    lin_a_.gather_x = g1_.get(), lin_a_.x_dim = 0, lin_a_.gather_w = g0_.get(), lin_a_.scatter_y = g2_.get();
    lin_a_.out_block = j, lin_a_.out_blocks = d, lin_a_.in_block = k * d + i, lin_a_.in_blocks = d * d;
    lin_b_.in = b, lin_b_.out = a_;
    lin_b_.gather_x = g2_.get(), lin_b_.x_dim = 0, lin_b_.gather_w = g0_.get(), lin_b_.scatter_y = g1_.get();
    lin_b_.out_block = k, lin_b_.out_blocks = d, lin_b_.in_block = j * d + i, lin_b_.in_blocks = d * d;
  }
}

const GridLinearSpec& TensorGrid::linear(const GridLayout& in) const {
  return in.feature == lin_a_.in.feature ? lin_a_ : lin_b_;
}

std::string TensorGrid::describe() const {
  const std::string q = std::to_string(q_);
  if (mode_ == "3d") return "3D cube " + q + " x " + q + " x " + q;
  if (mode_ == "2d") return "2D grid " + q + " x " + q;
  return "2.5D grid " + q + " x " + q + " x depth " + std::to_string(depth_);
}

}  // namespace booster::nn
