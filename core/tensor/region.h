// Region: which part of a larger logical tensor a tensor holds, a box (an offset and an
// extent per dimension: a tensor-parallel slice such as a row-parallel [out, in/tp]) or a
// flat range of the row-major order (a ZeRO shard). The local data of a region is
// contiguous: a box in row-major order of its extent, a flat range as is. Checkpoints
// record regions, and copying between two regions of one logical tensor walks the
// row-major runs they share.
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
  enum class Kind { box, flat };
  Shape full;                // the logical tensor's shape
  Kind kind = Kind::box;
  Shape offset, extent;      // box: one per dim; flat: {start}, {numel}

  /// The whole tensor.
  static Region whole(const Shape& full);
  /// A box; ShapeError unless it lies inside `full`.
  static Region box(const Shape& full, Shape offset, Shape extent);
  /// Elements [start, start + numel) of the row-major order; ShapeError unless inside.
  static Region flat(const Shape& full, int64_t start, int64_t numel);

  int64_t numel() const;
  /// True when the region is the whole tensor (either kind).
  bool is_whole() const;
  /// Shape of the local data: the extent of a box, [numel] of a flat range.
  Shape local_shape() const;
  /// The row-major runs of the logical tensor this region covers, in increasing order;
  /// trailing dimensions the box covers fully merge into longer runs.
  std::vector<Run> runs() const;
  /// Pieces of at most max_elems elements each (flat: sub-ranges; box: slabs along its
  /// outermost dimension that has more than one row, then smaller), covering it in order.
  std::vector<Region> split(int64_t max_elems) const;
  /// "[0:4, 8:16] of [8, 16]" or "elements [0, 64) of [8, 16]".
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
