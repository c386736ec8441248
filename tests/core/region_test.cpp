// Region geometry: runs of boxes, flat ranges and ranges of boxes; splitting; overlaps;
// the region a tensor records.
#include <gtest/gtest.h>

#include <numeric>

#include "core/tensor/region.h"
#include "core/tensor/tensor.h"

using namespace booster;

namespace {
// Every logical element a region covers, in its local order.
std::vector<int64_t> elements(const Region& r) {
  std::vector<int64_t> out(size_t(r.numel()), -1);
  for (auto& run : r.runs())
    for (int64_t i = 0; i < run.length; ++i) out[size_t(run.local + i)] = run.start + i;
  return out;
}
std::vector<int64_t> iota(int64_t from, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}
}  // namespace

TEST(Region, BoxesRangesAndRangesOfBoxes) {
  const Shape full{4, 6};
  // A column slice [:, 2:4]: one run per row.
  Region col = Region::box(full, {0, 2}, {4, 2});
  EXPECT_EQ(elements(col), (std::vector<int64_t>{2, 3, 8, 9, 14, 15, 20, 21}));
  EXPECT_EQ(col.runs().size(), 4u);
  EXPECT_EQ(col.local_shape(), (Shape{4, 2}));
  EXPECT_TRUE(col.is_box());
  // A row slice [1:3, :]: one merged run.
  Region rows = Region::box(full, {1, 0}, {2, 6});
  ASSERT_EQ(rows.runs().size(), 1u);
  EXPECT_EQ(elements(rows), iota(6, 12));
  // A flat range of the whole tensor.
  Region flat = Region::flat(full, 5, 7);
  EXPECT_EQ(elements(flat), iota(5, 7));
  EXPECT_EQ(flat.local_shape(), (Shape{7}));
  EXPECT_FALSE(flat.is_box());
  // A flat range of a box (a ZeRO shard of a tensor-parallel slice): elements 3..6 of col.
  Region both = col.sub_range(3, 4);
  EXPECT_EQ(elements(both), (std::vector<int64_t>{9, 14, 15, 20}));
  EXPECT_EQ(both.str(), "elements [3, 7) of box [0:4, 2:4] of [4, 6]");
  EXPECT_EQ(Region::whole(full).numel(), 24);
  EXPECT_TRUE(Region::whole(full).is_whole());
  EXPECT_EQ(Region::whole({}).runs().size(), 1u);  // a 0-d tensor is one element
  EXPECT_THROW(Region::box(full, {3, 0}, {2, 6}), ShapeError);
  EXPECT_THROW(Region::flat(full, 20, 5), ShapeError);
  EXPECT_THROW(col.sub_range(6, 3), ShapeError);
}

TEST(Region, SplitPiecesAreConsecutiveLocalRanges) {
  const Shape full{5, 3, 4};
  for (const Region& r : {Region::whole(full), Region::box(full, {1, 0, 1}, {3, 3, 2}), Region::flat(full, 7, 40),
                          Region::box(full, {0, 1, 0}, {1, 2, 4}).sub_range(1, 6)}) {
    for (int64_t max : {1, 3, 7, 100}) {
      std::vector<int64_t> joined;
      for (auto& piece : r.split(max)) {
        EXPECT_LE(piece.numel(), max) << r.str();
        auto e = elements(piece);
        joined.insert(joined.end(), e.begin(), e.end());
      }
      EXPECT_EQ(joined, elements(r)) << r.str() << " split by " << max;
    }
  }
}

TEST(Region, OverlapCopiesWhatTwoLayoutsShare) {
  const Shape full{6, 4};
  // Rows 1..3 (a box) against the flat range [6, 18).
  Region a = Region::box(full, {1, 0}, {3, 4}), b = Region::flat(full, 6, 12);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> seen;
  const int64_t n = for_each_overlap(a.runs(), b.runs(), [&](int64_t d, int64_t s, int64_t k) { seen.emplace_back(d, s, k); });
  EXPECT_EQ(n, 12 - 2);  // elements 6..15 of the box's 4..15
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_tuple(int64_t(2), int64_t(0), int64_t(10)));
  // Column halves never meet.
  EXPECT_EQ(for_each_overlap(Region::box(full, {0, 0}, {6, 2}).runs(), Region::box(full, {0, 2}, {6, 2}).runs(),
                             [](int64_t, int64_t, int64_t) {}),
            0);
}

TEST(Region, TensorsRecordTheirRegion) {
  Tensor t = Tensor::zeros({4, 2});
  EXPECT_EQ(t.region(), nullptr);
  t.set_region(Region::box({4, 6}, {0, 2}, {4, 2}));
  ASSERT_NE(t.region(), nullptr);
  EXPECT_EQ(t.region()->full, (Shape{4, 6}));
  Tensor same = t;
  same.set_data(Tensor::zeros({4, 2}));  // resharding keeps the handle's region
  EXPECT_NE(t.region(), nullptr);
  EXPECT_THROW(t.set_region(Region::box({4, 6}, {0, 0}, {4, 3})), ShapeError);
  t.set_region(Region::whole({4, 2}));
  EXPECT_EQ(t.region(), nullptr);
}

// A framed box: the same columns of each of a fused tensor's three parts (GPT-2's c_attn
// [in, 3E] split over tp), a box of [in, 3, E] holding elements of [in, 3E].
TEST(Region, FramedBoxesAreBoxesOfARefinedShape) {
  const Shape full{2, 12};  // in 2, three parts of 4
  const Region r = Region::framed_box(full, {2, 3, 4}, {0, 0, 2}, {2, 3, 2});  // rank 1 of tp 2
  EXPECT_EQ(elements(r), (std::vector<int64_t>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
  EXPECT_EQ(r.local_shape(), (Shape{2, 6}));
  EXPECT_EQ(r.numel(), 12);
  EXPECT_FALSE(r.is_whole());
  EXPECT_EQ(r.str(), "[0:2, 0:3, 2:4] of [2, 3, 4] ([2, 12])");
  EXPECT_NE(r, Region::box({2, 3, 4}, {0, 0, 2}, {2, 3, 2}));  // another logical tensor
  // Pieces of a split stay framed, and a flat range of it is a ZeRO shard of the slice.
  std::vector<int64_t> pieces;
  for (const Region& p : r.split(4))
    for (int64_t e : elements(p)) pieces.push_back(e);
  EXPECT_EQ(pieces, elements(r));
  EXPECT_EQ(elements(r.sub_range(3, 4)), (std::vector<int64_t>{7, 10, 11, 14}));
  // A bias [3E]: frame [3, E].
  EXPECT_EQ(elements(Region::framed_box({12}, {3, 4}, {0, 0}, {3, 2})), (std::vector<int64_t>{0, 1, 4, 5, 8, 9}));
  EXPECT_EQ(Region::framed_box({12}, {3, 4}, {0, 0}, {3, 2}).local_shape(), (Shape{6}));
  EXPECT_THROW(Region::framed_box(full, {3, 8}, {0, 0}, {3, 8}), ShapeError);      // does not refine [2, 12]
  EXPECT_THROW(Region::framed_box(full, {2, 3, 4}, {0, 0, 3}, {2, 3, 2}), ShapeError);  // outside
}
