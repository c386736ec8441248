// Tensor-parallel grids beyond 1D (legacy Colossal-AI's 2D, 2.5D and 3D modes): the
// tensor-parallel group of the (dp, pp, tp) mesh split into the groups of a q x q grid
// (2D, SUMMA / Optimus), d stacked q x q grids (2.5D, Tesseract) or a d x d x d cube (3D),
// created once from the tp group's ranks (never from a hard-coded world-rank order).
//
// Beyond 1D the activations are partitioned too: each rank holds a block of the batch rows
// and a block of the features, [B / row_blocks, T, H / feature_blocks]. A GridLayout says
// which block and which groups complete it. A linear gathers its input along one group and
// its weight along another, multiplies the local blocks, and (3D) reduce-scatters the
// output along a third; which groups play which role is a GridLinearSpec. 2D is 2.5D with
// depth 1. In 3D every linear exchanges the roles of two cube axes, so activations
// alternate between two layouts (A in, B out, and back); a transformer block has an even
// number of linears on every path, so its residuals meet in layout A.
#pragma once

#include <string>

#include "core/dist/process_group.h"

namespace booster::nn {

/// Which block of an activation this rank holds, and the groups around it.
struct GridLayout {
  /// Ranks holding the same rows, each another block of the features (group rank = feature block).
  const dist::ProcessGroup* feature = nullptr;
  /// Ranks holding the same feature block, each another block of the rows (group rank = row block).
  const dist::ProcessGroup* rows = nullptr;
  int64_t row_block() const { return rows->rank(); }
  int64_t row_blocks() const { return rows->size(); }
  int64_t feature_block() const { return feature->rank(); }
  int64_t feature_blocks() const { return feature->size(); }
};

/// How a linear y = x W^T (weight [out, in]) runs on a grid.
struct GridLinearSpec {
  GridLayout in, out;                             // the input's layout and the output's
  const dist::ProcessGroup* gather_x = nullptr;   // all-gather the input along x_dim over this group
  int64_t x_dim = -1;                             // -1: features (2D, 2.5D); 0: rows (3D)
  const dist::ProcessGroup* gather_w = nullptr;   // all-gather the weight along its input dim
  const dist::ProcessGroup* scatter_y = nullptr;  // 3D: reduce-scatter the output along the rows
  const dist::ProcessGroup* depth = nullptr;      // 2.5D: the weight is replicated across it
  /// The weight block this rank holds: out block / out_blocks, in block / in_blocks.
  int64_t out_block = 0, out_blocks = 1, in_block = 0, in_blocks = 1;
};

class TensorGrid {
 public:
  /// Splits `tp` (collective over it) for mode "2d" (size q^2), "2.5d" (q^2 * depth) or
  /// "3d" (q^3); ValueError naming the mode and the size when it is not such a grid.
  TensorGrid(const dist::ProcessGroup& tp, const std::string& mode, int depth = 1);
  /// The grid's edge (q, or d for 3D) for a tp size; ValueError naming the mode and the size
  /// when it is not such a grid (no communication: option checks use it).
  static int edge(const std::string& mode, int size, int depth = 1);
  TensorGrid(const TensorGrid&) = delete;
  TensorGrid& operator=(const TensorGrid&) = delete;

  const std::string& mode() const { return mode_; }
  /// The grid's edge: q (2D, 2.5D) or d (3D).
  int q() const { return q_; }
  /// 2.5D's depth (1 otherwise).
  int depth() const { return depth_; }
  /// The layout of the residual stream (embeddings, layer norms, the classifier's input).
  const GridLayout& layout() const { return a_; }
  /// The spec of a linear whose input is in `in` (layout(), or in 3D a linear's output).
  const GridLinearSpec& linear(const GridLayout& in) const;
  /// Rows an activation is split into (q, q * depth, d^2).
  int64_t row_blocks() const { return a_.row_blocks(); }
  /// Blocks an activation's features are split into (q or d).
  int64_t feature_blocks() const { return a_.feature_blocks(); }
  /// Blocks a weight's input features are split into (q or d^2).
  int64_t in_blocks() const { return lin_a_.in_blocks; }
  /// "2D grid 2 x 2", "2.5D grid 2 x 2 x depth 2", "3D cube 2 x 2 x 2".
  std::string describe() const;
  /// Whole models on every rank (no pipeline; the plugin sets it): a batch whose rows do not
  /// divide into the row blocks (an evaluation's last) is padded with zero rows by the patch
  /// projection, and the classifier drops their logits. Rows never mix, so the others are
  /// exact and the padding takes no gradient.
  void set_pad_rows(bool on) { pad_rows_ = on; }
  bool pad_rows() const { return pad_rows_; }
  /// The rows of the batch in flight before padding (-1: not padded); the patch projection
  /// sets it, the classifier reads it.
  void set_rows_in_flight(int64_t n) const { rows_in_flight_ = n; }
  int64_t rows_in_flight() const { return rows_in_flight_; }

 private:
  std::string mode_;
  int q_ = 1, depth_ = 1;
  // 2D / 2.5D: row (same rows), col (same column), dep (same position, other depth), rows
  // (same column at any depth). 3D: axes i, j, k and the planes ij, ik.
  dist::GroupPtr g0_, g1_, g2_, g3_, g4_;
  GridLayout a_;
  GridLinearSpec lin_a_, lin_b_;
  bool pad_rows_ = false;
  mutable int64_t rows_in_flight_ = -1;
};

}  // namespace booster::nn
