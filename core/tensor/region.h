// Region: which part of a larger logical tensor a tensor holds. In general a flat range of
// the row-major order of a box: the box (an offset and an extent per dimension) is a
// tensor-parallel slice such as a row-parallel [out, in/tp]; a flat range of the whole
// tensor is a ZeRO shard; a flat range of a box is a ZeRO shard of a tensor-parallel slice.
// The local data of a region is contiguous: the range of the box's row-major order.
// Checkpoints record regions, and copying between two regions of one logical tensor walks
// the row-major runs they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace booster {

using Shape = std::vector<int64_t>;

/// A stretch of the logical tensor's row-major order held by a region: `length` elements
/// from `start`, found at `local` in the region's own data.
struct Run {
  int64_t start, length, local;
};

struct Region {
  Shape full;             // the logical tensor's shape
  Shape frame;            // the shape the box is given in: a refinement of full (each dim of
                          // full the product of consecutive dims of frame, e.g. [E, 3, E] for
                          // GPT-2's fused q/k/v [E, 3E]); empty: full itself
  Shape offset, extent;   // the box: one entry per dim of the frame
  int64_t range_start = 0, range_numel = 0;  // the flat range of the box's row-major order

  /// The whole tensor.
  static Region whole(const Shape& full);
  /// A box; ShapeError unless it lies inside `full`.
  static Region box(const Shape& full, Shape offset, Shape extent);
  /// A box of `full` viewed as `frame` (same elements, full's dims split into consecutive
  /// ones): a tensor-parallel slice of a fused tensor, e.g. the same columns of each of
  /// q, k and v in [E, 3E] as [0:E, 0:3, c0:c1] of [E, 3, E]. ShapeError unless frame
  /// refines full and the box lies inside it.
  static Region framed_box(const Shape& full, const Shape& frame, Shape offset, Shape extent);
  /// Elements [start, start + numel) of the row-major order; ShapeError unless inside.
  static Region flat(const Shape& full, int64_t start, int64_t numel);
  /// Elements [start, start + numel) of this region's local order, as a region.
  Region sub_range(int64_t start, int64_t numel) const;

  int64_t numel() const { return range_numel; }
  /// The shape offset and extent index: the frame, or full when there is none.
  const Shape& coords() const { return frame.empty() ? full : frame; }
  /// Elements of the box.
  int64_t box_numel() const;
  /// True when the region is the whole tensor.
  bool is_whole() const;
  /// True when the region is its whole box (no flat sub-range).
  bool is_box() const { return range_start == 0 && range_numel == box_numel(); }
  /// Shape of the local data: the extent of a box (in full's dims for a framed box: [E, 3E/tp]
  /// for [E, 3, E/tp]), [numel] of a flat range.
  Shape local_shape() const;
  /// The row-major runs of the logical tensor this region covers, in increasing order;
  /// trailing dimensions the box covers fully merge into longer runs.
  std::vector<Run> runs() const;
  /// Pieces of at most max_elems elements each whose local data are consecutive ranges of
  /// this region's (a box: slabs along its outermost dimension with more than one row,
  /// then smaller; a flat range: sub-ranges), covering it in order.
  std::vector<Region> split(int64_t max_elems) const;
  /// "[0:4, 8:16] of [8, 16]", "elements [0, 64) of [8, 16]", or both for a range of a box.
  std::string str() const;
  bool operator==(const Region& o) const;
  bool operator!=(const Region& o) const { return !(*this == o); }
};

/// Calls copy(dst_local, src_local, n) for every stretch of the logical tensor that both
/// regions hold (same logical shape required), in increasing order. Returns the elements
/// shared.
template <typename F>
int64_t for_each_overlap(const std::vector<Run>& dst, const std::vector<Run>& src, F&& copy) {
  int64_t shared = 0;
  size_t i = 0, j = 0;
  while (i < dst.size() && j < src.size()) {
    const Run& a = dst[i];
    const Run& b = src[j];
    const int64_t lo = a.start > b.start ? a.start : b.start;
    const int64_t hi_a = a.start + a.length, hi_b = b.start + b.length;
    const int64_t hi = hi_a < hi_b ? hi_a : hi_b;
    if (lo < hi) {
      copy(a.local + (lo - a.start), b.local + (lo - b.start), hi - lo);
      shared += hi - lo;
    }
    if (hi_a <= hi_b) ++i;
    else ++j;
  }
  return shared;
}

}  // namespace booster
