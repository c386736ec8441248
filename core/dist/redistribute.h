// Moving the rows of a batch between data layouts inside a group (Galvatron's relocation
// of activations between layers whose tensor-parallel groups differ). A layout says which
// rows [first, second) of the group's whole batch each group rank holds; several ranks may
// hold the same rows (a tensor-parallel group holds one data-parallel slice). The forward
// gives every rank exactly the rows the new layout assigns it, each row taken from one of
// its holders (itself when it holds it: shrinking a tensor-parallel group between
// consecutive layouts moves nothing), in one all-to-all. Its backward is the same move from
// the new layout to the old: the holders of a row in the new layout hold equal gradients
// (a tensor-parallel layer all-reduces its input's gradient), so one of them is enough.
#pragma once

#include <utility>
#include <vector>

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::dist {

/// Rows [first, second) of the whole batch per group rank.
using RowLayout = std::vector<std::pair<int64_t, int64_t>>;

/// The layout of `batch` rows over `size` ranks split in tensor-parallel groups of `tp`:
/// consecutive groups (ranks [k tp, (k + 1) tp) hold slice k) or strided ones (ranks k, k +
/// size / tp, ... hold slice k); slices are batch / (size / tp) rows, in order.
RowLayout tp_row_layout(int64_t batch, int size, int tp, bool consecutive);

/// x: [rows of `from` for this rank, ...] -> [rows of `to` for this rank, ...]; differentiable,
/// the gradient times backward_scale (a layerwise plan keeps each row's gradient in the
/// proportion of its layout's data-parallel size). ShapeError when x does not hold this
/// rank's rows of `from`.
Tensor redistribute_rows(const Tensor& x, const RowLayout& from, const RowLayout& to, const ProcessGroup& g,
                         double backward_scale = 1.0);

}  // namespace booster::dist
