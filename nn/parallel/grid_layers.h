// The layers of 2D, 2.5D and 3D tensor parallelism (legacy Colossal-AI's Linear2D /
// Linear2p5D / Linear3D, LayerNorm2D..., Classifier2D..., PatchEmbedding2D...), on the grids
// of grid.h. Each adopts a model's parameter handles and reshards them in place into the
// block its rank holds (a box of the logical tensor, so checkpoints load under any layout);
// a block that several ranks hold (a bias, a layer norm's affine, the classifier's columns)
// is the same on each and its gradient is completed over them in backward.
//
// Activations are [rows / row_blocks, ..., features / feature_blocks] (GridLayout). Every
// rank of a replica is handed the whole batch; the patch projection takes its rows, the
// classifier gathers the logits of every row back, so the criterion and the loop are
// unchanged.
#pragma once

#include "nn/layers.h"
#include "nn/parallel/grid.h"

namespace booster::nn {

/// y = x W^T + b on a grid: the input gathered over spec.gather_x, the weight over
/// spec.gather_w, one local product, (3D) the output reduce-scattered over spec.scatter_y,
/// then this rank's bias block (b: [out / out_blocks] or undefined) added to its rows, in
/// the op (no second copy of the output is kept). Backward gathers the same again (only the
/// local blocks are kept for it), reduce-scatters the input gradient over gather_x and the
/// weight gradient over gather_w; the bias gets its rows' column sums.
/// x: [R, ..., in_x] (its layout spec.in) -> [R', ..., out / out_blocks] (layout spec.out).
Tensor grid_matmul(const Tensor& x, const Tensor& w, const Tensor& b, const GridLinearSpec& spec);

/// Layer norm over features split across `feature` (two-pass: the mean, then the squared
/// deviations from it, each summed over the group; backward sums its two row statistics in one
/// all-reduce). x: [..., H / parts] -> same; w, b: [H / parts] (this rank's block).
Tensor grid_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const dist::ProcessGroup& feature);

class GridLinear : public Linear {
 public:
  /// Reshards `native`'s (a Linear) weight to spec's block and its bias to the output's
  /// feature block (a GridLinear is returned as is).
  static std::shared_ptr<Linear> from_native_module(const std::shared_ptr<Module>& native, const TensorGrid& grid,
                                                    const GridLinearSpec& spec);
  GridLinear(Tensor weight, Tensor bias, const TensorGrid& grid, const GridLinearSpec& spec);
  std::string type_name() const override;
  // x: [R, ..., in_x] -> [R', ..., out / out_blocks]
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override;
  const TensorGrid& grid_;
  const GridLinearSpec& spec_;
};

class GridLayerNorm : public LayerNorm {
 public:
  /// Adopts `native`'s (an affine LayerNorm) weight and bias, resharded to the layout's feature block.
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native, const TensorGrid& grid);
  GridLayerNorm(Tensor weight, Tensor bias, double eps, const TensorGrid& grid);
  std::string type_name() const override;
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override;
  const TensorGrid& grid_;
};

/// The classifier on the residual layout: weight [C, H] split along H, whole bias; the
/// logits summed over the feature blocks and every row gathered back: [R, H / f] -> [B, C],
/// the same on every rank of the grid.
class GridClassifier : public Linear {
 public:
  static std::shared_ptr<Linear> from_native_module(const std::shared_ptr<Module>& native, const TensorGrid& grid);
  GridClassifier(Tensor weight, Tensor bias, const TensorGrid& grid);
  std::string type_name() const override;
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override;
  const TensorGrid& grid_;
};

/// A patch projection (Conv2d) on the grid: this rank's rows of the whole batch, its block
/// of the output channels. [B, C, H, W] (no gradient) -> [B / row_blocks, E / f, H', W'].
class GridPatchProjection : public UnaryModule {
 public:
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native, const TensorGrid& grid);
  GridPatchProjection(Tensor weight, Tensor bias, std::pair<int64_t, int64_t> stride,
                      std::pair<int64_t, int64_t> padding, const TensorGrid& grid);
  std::string type_name() const override;
  Tensor forward(const Tensor& x) override;
  TensorSlot weight, bias;

 protected:
  std::shared_ptr<Module> fresh() const override;
  std::pair<int64_t, int64_t> stride_, padding_;
  const TensorGrid& grid_;
};

/// This rank's rows of a whole batch on the grid (ShapeError naming the grid when the rows
/// do not divide into its row blocks). x: [B, ...] -> [B / row_blocks, ...].
Tensor grid_rows(const Tensor& x, const TensorGrid& grid);

/// Legacy Colossal-AI's name of a grid layer kind ("Linear" -> "Linear2D", "Linear2p5D", "Linear3D").
std::string grid_type_name(const TensorGrid& grid, const std::string& kind);

}  // namespace booster::nn
