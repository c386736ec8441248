// Tensor metadata, views without copies, dtype conversion, allocator accounting, RNG.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "core/kernels/ops.h"
#include "core/tensor/random.h"
#include "core/tensor/caching_tier.h"
#include "core/tensor/strided.h"
#include "core/tensor/tensor.h"

using namespace booster;

namespace {
Tensor iota(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return Tensor::from_vector(v, s);
}
}  // namespace

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_TRUE(t.is_contiguous());
  for (float v : t.to_vector()) EXPECT_EQ(v, 1.5f);
  EXPECT_EQ(Tensor::arange(4).to_int_vector(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kAlignment, 0u);
  EXPECT_THROW(t.data<bf16_t>(), DTypeError);
  EXPECT_THROW(t.item(), ShapeError);
  EXPECT_THROW(Tensor::from_vector({1, 2, 3}, {2, 2}), ShapeError);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_TRUE(p.shares_storage(t));
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  // p[k][i][j] == t[i][j][k]
  auto pv = p.contiguous().to_vector();
  EXPECT_EQ(pv[size_t((3 * 2 + 1) * 3 + 2)], float((1 * 3 + 2) * 4 + 3));

  Tensor n = t.narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_EQ(n.contiguous().to_vector()[0], 1.f);
  EXPECT_EQ(t.slice(1, -1, 3).contiguous().to_vector()[0], 8.f);
  EXPECT_EQ(t.select(0, 1).contiguous().to_vector()[0], 12.f);

  Tensor e = Tensor::from_vector({1, 2, 3}, {3}).expand({2, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 1}));
  EXPECT_EQ(e.contiguous().to_vector(), (std::vector<float>{1, 2, 3, 1, 2, 3}));

  Tensor v = t.view({6, 4});
  EXPECT_TRUE(v.shares_storage(t));
  EXPECT_EQ(t.view({-1}).numel(), 24);
  EXPECT_THROW(t.view({5, -1}), ShapeError);
  // A transposed tensor cannot be viewed flat, but can be reshaped (with a copy).
  Tensor tr = t.transpose(1, 2);
  EXPECT_THROW(tr.view({24}), ShapeError);
  Tensor r = tr.reshape({24});
  EXPECT_FALSE(r.shares_storage(t));
  // ... while splitting a dim of a transposed tensor is still a view.
  EXPECT_TRUE(tr.view({2, 2, 2, 3}).shares_storage(t));
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(t.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_THROW(t.squeeze(0), ShapeError);
  EXPECT_THROW(t.narrow(1, 2, 2), ShapeError);
}

TEST(Tensor, CopyAndFillThroughViews) {
  Tensor t = Tensor::zeros({3, 4});
  t.transpose(0, 1).narrow(0, 1, 1).fill_(7);  // column 1
  auto v = t.to_vector();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v[size_t(i * 4 + 1)], 7.f);
  EXPECT_EQ(v[0], 0.f);
  Tensor src = iota({4, 3});
  t.copy_(src.transpose(0, 1));
  EXPECT_EQ(t.to_vector()[1], 3.f);
}

// A copy out of a permuted view walks its rows like an odometer, each thread from its own
// first row: every element lands where its index says, at many dims, ragged sizes (thread
// runs starting mid-way through every dim), rows of one element, and a dtype conversion.
TEST(Tensor, PermutedCopiesPutEveryElementInPlace) {
  const Shape shape{3, 5, 7, 4, 6, 9};  // 22680 elements; x2: past the parallel threshold
  for (int64_t scale : {1, 2})
    for (DType dt : {DType::f32, DType::bf16}) {
      const Shape s{shape[0] * scale, shape[1], shape[2], shape[3], shape[4], shape[5]};
      Tensor x = iota(s);  // element value = its flat index
      x = x.to(dt).to(DType::f32);  // bf16 keeps integers below 256 exactly only: compare to x itself
      for (auto perm : std::vector<std::vector<int64_t>>{{0, 2, 4, 1, 3, 5}, {5, 4, 3, 2, 1, 0}, {1, 0, 3, 2, 5, 4}}) {
        Tensor v = x.to(dt).permute(perm);
        Tensor c = v.contiguous();
        Tensor wide = v.to(DType::f32);  // converting copy through the same walk
        const std::vector<float> got = c.to(DType::f32).to_vector(), got_wide = wide.to_vector(), src = x.to_vector();
        const Shape& ps = c.shape();
        // the element at permuted index (i0..i5) is x at the index with dims put back
        std::vector<int64_t> idx(6, 0);
        for (size_t flat = 0; flat < got.size(); ++flat) {
          int64_t rem = int64_t(flat), orig = 0;
          for (int d = 5; d >= 0; --d) idx[size_t(d)] = rem % ps[size_t(d)], rem /= ps[size_t(d)];
          std::vector<int64_t> o(6);
          for (int d = 0; d < 6; ++d) o[size_t(perm[size_t(d)])] = idx[size_t(d)];
          for (int d = 0; d < 6; ++d) orig = orig * s[size_t(d)] + o[size_t(d)];
          ASSERT_EQ(got[flat], src[size_t(orig)]) << dtype_name(dt) << " element " << flat;
          ASSERT_EQ(got_wide[flat], src[size_t(orig)]) << dtype_name(dt) << " converted element " << flat;
        }
      }
    }
}

TEST(Tensor, SoleOwnerSeesOtherHandlesAndViews) {
  // Autograd reuses a gradient buffer in place only when nothing else can see it.
  Tensor t = Tensor::zeros({4, 4});
  EXPECT_TRUE(t.is_sole_owner());
  {
    Tensor other = t;
    EXPECT_FALSE(t.is_sole_owner());
  }
  EXPECT_TRUE(t.is_sole_owner());
  {
    Tensor v = t.view({16});
    EXPECT_FALSE(t.is_sole_owner());
  }
  EXPECT_TRUE(t.is_sole_owner());
}

TEST(Tensor, TransposedCopiesInTiles) {
  // Sizes that are not multiples of the 32-element tile (or of the 16 x 16 blocks that go
  // through registers on AVX-512) and sizes that are, in both 2- and 4-byte dtypes,
  // and a batched transpose that coalesces to 2D only per batch.
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{37, 1000}, {300, 67}, {1, 5000}, {64, 96}}) {
      std::vector<float> v(size_t(r * c));
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 251) - 125);
      Tensor a = Tensor::from_vector(v, {r, c}, dt);
      std::vector<float> t = a.transpose(0, 1).contiguous().to_vector();
      for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j < r; ++j) ASSERT_EQ(t[size_t(i * r + j)], v[size_t(j * c + i)]) << i << "," << j;
    }
    std::vector<float> v(3 * 40 * 70);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 97);
    Tensor b = Tensor::from_vector(v, {3, 40, 70}, dt);
    std::vector<float> t = b.transpose(1, 2).contiguous().to_vector();
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t i = 0; i < 70; ++i)
        for (int64_t j = 0; j < 40; ++j)
          ASSERT_EQ(t[size_t((k * 70 + i) * 40 + j)], v[size_t((k * 40 + j) * 70 + i)]);
  }
}

// Gradients laid out like the pieces of one tensor: q, k and v heads split from one
// [B, T, 3 x h x d] projection come back as views of one new storage at the same offsets;
// views that do not tile a block (one view thrice, pieces with a gap, a piece missing
// from the middle) each get their own.
TEST(Tensor, EmptySameLayoutsJoinOnlyPiecesThatTileABlock) {
  const int64_t b = 2, t = 5, h = 3, d = 4, c = h * d;
  Tensor y = Tensor::empty({b, t, 3 * c});
  auto heads = [&](int64_t i) { return y.narrow(2, i * c, c).view({b, t, h, d}).permute({0, 2, 1, 3}); };
  std::vector<Tensor> got = empty_same_layouts({heads(0), heads(1), heads(2)}, DType::bf16);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(got[size_t(i)].shares_storage(got[0]));
    EXPECT_EQ(got[size_t(i)].strides(), heads(i).strides());
    EXPECT_EQ(got[size_t(i)].offset(), i * c);
    EXPECT_EQ(got[size_t(i)].dtype(), DType::bf16);
  }
  EXPECT_EQ(got[0].storage()->nbytes(), size_t(b * t * 3 * c * 2));
  auto apart = [](const std::vector<Tensor>& v) {
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (v[i].defined() && v[j].defined() && v[i].shares_storage(v[j])) return false;
    return true;
  };
  EXPECT_TRUE(apart(empty_same_layouts({heads(0), heads(0), heads(0)}, DType::f32)));
  EXPECT_TRUE(apart(empty_same_layouts({heads(0), Tensor(), heads(2)}, DType::f32)));
  Tensor wide = Tensor::empty({b, t, 4 * c});
  EXPECT_TRUE(apart(empty_same_layouts({wide.narrow(2, 0, c), wide.narrow(2, c, c), wide.narrow(2, 2 * c, c)},
                                       DType::f32)));
  // Two pieces that are the whole of [b, t, 2c] do join; undefined entries stay undefined.
  Tensor two = Tensor::empty({b, t, 2 * c});
  got = empty_same_layouts({two.narrow(2, 0, c), Tensor(), two.narrow(2, c, c)}, DType::f32);
  EXPECT_FALSE(got[1].defined());
  EXPECT_TRUE(got[0].shares_storage(got[2]));
}

// Row blocks with their own storage handles: each a sole owner (the engine adopts it as a
// gradient without a copy), reading the parent's memory, which outlives the parent handle.
TEST(Tensor, SplitRowsOwnedGivesSoleOwnersOfTheParentsMemory) {
  std::vector<Tensor> blocks;
  {
    Tensor t = iota({6, 4});
    blocks = split_rows_owned(t, {1, 3, 2});
    EXPECT_EQ(blocks[1].raw_data(), static_cast<void*>(t.data<float>() + 4));
  }
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[1].shape(), (Shape{3, 4}));
  for (const Tensor& b : blocks) EXPECT_TRUE(b.is_sole_owner());
  EXPECT_EQ(blocks[2].to_vector(), (std::vector<float>{16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_THROW(split_rows_owned(iota({4, 2}), {3, 2}), Error);
  EXPECT_THROW(split_rows_owned(iota({4, 2}).transpose(0, 1), {1}), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.5f / 256)), 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(INFINITY))));
  EXPECT_EQ(from_f16(to_f16(1.0f + 1.0f / 2048)), 1.0f);  // f16 tie to even
  EXPECT_EQ(from_f16(to_f16(65504.f)), 65504.f);
}

TEST(DType, ConversionRoundTrips) {
  Tensor t = Tensor::from_vector({0.5f, -2.25f, 3.0f, 1e-3f}, {4});
  for (DType dt : {DType::bf16, DType::f16}) {
    auto back = t.to(dt).to(DType::f32).to_vector();
    EXPECT_EQ(back[0], 0.5f);
    EXPECT_EQ(back[1], -2.25f);
    EXPECT_NEAR(back[3], 1e-3f, 1e-5f);
  }
  EXPECT_EQ(t.to(DType::i64).to_int_vector(), (std::vector<int64_t>{0, -2, 3, 0}));
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("f8"), DTypeError);
}

// i32 holds token ids and labels in half an i64's bytes: conversions, item, fill and copies
// through strided views keep every value exact (past float's 2^24 too).
TEST(DType, I32KeepsIntegersExact) {
  EXPECT_EQ(dtype_from_name("int32"), DType::i32);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_TRUE(is_index(DType::i32) && is_index(DType::i64) && !is_index(DType::f32) && !is_index(DType::u8));
  const int64_t big = (int64_t(1) << 30) + 3;  // not a float
  Tensor t = Tensor::from_ints({big, -7, 0, 50256, 65, (int64_t(1) << 24) + 1}, {2, 3}).to(DType::i32);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_int_vector(), (std::vector<int64_t>{big, -7, 0, 50256, 65, (int64_t(1) << 24) + 1}));
  EXPECT_EQ(t.select(0, 0).narrow(0, 0, 1).item(), double(big));
  // A column (strided) to i64 and back: by value, not through float.
  EXPECT_EQ(t.transpose(0, 1).contiguous().to_int_vector(),
            (std::vector<int64_t>{big, 50256, -7, 65, 0, (int64_t(1) << 24) + 1}));
  EXPECT_EQ(t.narrow(1, 2, 1).to(DType::i64).to_int_vector(), (std::vector<int64_t>{0, (int64_t(1) << 24) + 1}));
  Tensor f = Tensor::empty({3}, DType::i32);
  f.fill_(double(big));
  EXPECT_EQ(f.to_int_vector(), (std::vector<int64_t>{big, big, big}));
  EXPECT_EQ(t.to(DType::f32).to_vector()[3], 50256.f);
  EXPECT_EQ(as_indices(t, "ids").dtype(), DType::i64);
  EXPECT_EQ(as_indices(t, "ids").to_int_vector(), t.to_int_vector());
  try {
    as_indices(Tensor::ones({2}), "my_op: ids");
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("my_op: ids must be integer indices (i64 or i32), got f32 [2]"), std::string::npos)
        << e.what();
  }
}

TEST(Allocator, AccountsBytesAndPeak) {
  MemoryTier& host = host_tier();
  const size_t before = host.bytes_in_use();
  host.reset_peak();
  {
    Tensor a = Tensor::empty({1024}, DType::f32);
    EXPECT_EQ(host.bytes_in_use(), before + 4096);
    Tensor b = Tensor::empty({512}, DType::bf16);
    EXPECT_EQ(host.peak_bytes(), before + 4096 + 1024);
  }
  EXPECT_EQ(host.bytes_in_use(), before);
  EXPECT_EQ(host.peak_bytes(), before + 5120);
}

TEST(Allocator, HostTierReusesFreedLargeBlocks) {
  CachingHostTier tier("test_cache", size_t(64) << 20);
  const size_t n = size_t(3) << 20;
  void* a = tier.allocate(n);
  tier.deallocate(a, n);
  EXPECT_EQ(tier.bytes_in_use(), 0u);
  EXPECT_EQ(tier.bytes_cached(), CachingHostTier::size_class(n));
  void* b = tier.allocate(n - 4096);  // same size class: the same block
  EXPECT_EQ(a, b);
  EXPECT_EQ(tier.bytes_cached(), 0u);
  EXPECT_EQ(tier.bytes_in_use(), n - 4096);
  tier.deallocate(b, n - 4096);
  tier.empty_cache();
  EXPECT_EQ(tier.bytes_cached(), 0u);
  // Small blocks are never cached; past the limit, freed blocks go back to the OS.
  void* s = tier.allocate(1000);
  tier.deallocate(s, 1000);
  EXPECT_EQ(tier.bytes_cached(), 0u);
  CachingHostTier tight("test_tight", size_t(1) << 20);
  void* big = tight.allocate(n);
  tight.deallocate(big, n);
  EXPECT_EQ(tight.bytes_cached(), 0u);
}

TEST(Allocator, AThreadGetsBackTheBlocksItFreed) {
  // Threads each running a share of a batch reuse their own blocks (their lines in their
  // own caches), not each other's.
  CachingHostTier tier("test_threads", size_t(64) << 20);
  const size_t n = size_t(3) << 20;
  std::barrier sync(2);
  void *a1 = nullptr, *a2 = nullptr, *b1 = nullptr, *b2 = nullptr;
  auto run = [&](void*& first, void*& again) {
    first = tier.allocate(n);
    sync.arrive_and_wait();
    tier.deallocate(first, n);
    sync.arrive_and_wait();  // both blocks idle now
    again = tier.allocate(n);
  };
  std::thread t1([&] { run(a1, a2); }), t2([&] { run(b1, b2); });
  t1.join();
  t2.join();
  EXPECT_NE(a1, b1);
  EXPECT_EQ(a2, a1);
  EXPECT_EQ(b2, b1);
  tier.deallocate(a2, n);
  tier.deallocate(b2, n);
  void* c = tier.allocate(n);  // this thread has none of its own: it takes another's
  EXPECT_TRUE(c == a1 || c == b1);
  tier.deallocate(c, n);
  tier.empty_cache();
}

TEST(Allocator, LargeBlocksStartOnHugePageBoundaries) {
  CachingHostTier tier("test_huge", size_t(64) << 20);
  for (size_t n : {size_t(2) << 20, size_t(9437184) + 12345, size_t(19) << 20}) {
    auto* p = static_cast<unsigned char*>(tier.allocate(n));
    if (CachingHostTier::huge_pages()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u) << n;
    }
    p[0] = 1;  // the whole block is mapped, first byte to last
    p[n - 1] = 2;
    EXPECT_EQ(p[0] + p[n - 1], 3);
    tier.deallocate(p, n);
  }
  tier.empty_cache();
  EXPECT_EQ(tier.bytes_cached(), 0u);
}

TEST(Allocator, MidSizeBlocksShareHugePageSlabs) {
  const size_t n = 600000, cls = CachingHostTier::size_class(n), per_slab = (size_t(8) << 20) / cls;
  CachingHostTier tier("test_slab", size_t(64) << 20);
  std::vector<unsigned char*> blocks;
  for (size_t i = 0; i < per_slab + 2; ++i) {  // one slab and two blocks of the next
    blocks.push_back(static_cast<unsigned char*>(tier.allocate(n)));
    std::memset(blocks.back(), int(i + 1), n);  // every byte mapped and writable
    if (i == 0 && CachingHostTier::huge_pages()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[0]) % (size_t(2) << 20), 0u);
      EXPECT_EQ(tier.bytes_cached(), (per_slab - 1) * cls);  // the slab's other blocks, idle
    }
  }
  std::set<unsigned char*> starts(blocks.begin(), blocks.end());
  EXPECT_EQ(starts.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[i]) % kAlignment, 0u);
    EXPECT_TRUE(blocks[i][0] == i + 1 && blocks[i][n - 1] == i + 1) << "block " << i << " overlaps another";
  }
  EXPECT_EQ(tier.bytes_in_use(), blocks.size() * n);
  for (auto* b : blocks) tier.deallocate(b, n);
  tier.empty_cache();
  EXPECT_EQ(tier.bytes_cached(), 0u);
  // Under a footprint limit, or with a cache limit too small for a slab's idle blocks: one block at a time.
  CachingHostTier capped("test_slab_capped", size_t(64) << 20), small("test_slab_small", size_t(1) << 20);
  capped.set_footprint_limit(size_t(32) << 20);
  for (CachingHostTier* t : {&capped, &small}) {
    void* p = t->allocate(n);
    EXPECT_EQ(t->bytes_cached(), 0u) << t->name();
    t->deallocate(p, n);
    t->empty_cache();
  }
}

// Blocks from 64 KB are cached; under a footprint limit (Gemini's cap, which counts the
// resident set) only those from 256 KB idle in the cache, smaller ones go back at once.
TEST(Allocator, SmallCachedBlocksIdleOnlyWithoutAFootprintLimit) {
  const size_t n = 100000;
  CachingHostTier free_tier("test_small", size_t(64) << 20), capped("test_small_capped", size_t(64) << 20);
  capped.set_footprint_limit(size_t(32) << 20);
  void* a = free_tier.allocate(n);
  free_tier.deallocate(a, n);
  EXPECT_GE(free_tier.bytes_cached(), CachingHostTier::size_class(n));
  EXPECT_EQ(free_tier.allocate(n), a);  // the same block again
  free_tier.deallocate(a, n);
  free_tier.empty_cache();
  void* b = capped.allocate(n);
  capped.deallocate(b, n);
  EXPECT_EQ(capped.bytes_cached(), 0u);
  void* big = capped.allocate(size_t(1) << 20);
  capped.deallocate(big, size_t(1) << 20);
  EXPECT_EQ(capped.bytes_cached(), CachingHostTier::size_class(size_t(1) << 20));
  capped.empty_cache();
}

TEST(Allocator, SizeClassesBoundTheSlack) {
  for (size_t n : {size_t(1) << 18, (size_t(1) << 18) + 1, size_t(3152) * 3072 * 4, size_t(1) << 30}) {
    const size_t c = CachingHostTier::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(double(c), double(n) * 1.0625 + 64);
    EXPECT_EQ(c % kAlignment, 0u);
  }
}

TEST(Allocator, SecondTierIsSeparate) {
  MemoryTier& slow = register_tier(std::make_unique<MemoryTier>("test_slow"));
  EXPECT_THROW(register_tier(std::make_unique<MemoryTier>("test_slow")), ValueError);
  EXPECT_EQ(&memory_tier("test_slow"), &slow);
  EXPECT_THROW(memory_tier("nope"), ValueError);
  const size_t host_before = host_tier().bytes_in_use();
  Tensor t = Tensor::empty({100}, DType::f32, &slow);
  EXPECT_EQ(slow.bytes_in_use(), 400u);
  EXPECT_EQ(host_tier().bytes_in_use(), host_before);
}

TEST(Random, ReproducibleAndPerStream) {
  Generator a(42, 0), b(42, 0), c(42, 1);
  Tensor x = Tensor::empty({1000}), y = Tensor::empty({1000}), z = Tensor::empty({1000});
  a.normal_(x);
  b.normal_(y);
  c.normal_(z);
  EXPECT_EQ(x.to_vector(), y.to_vector());
  EXPECT_NE(x.to_vector(), z.to_vector());
  // Saved state resumes the same sequence.
  GeneratorState s = a.state();
  a.uniform_(x);
  b.set_state(s);
  b.uniform_(y);
  EXPECT_EQ(x.to_vector(), y.to_vector());
}

TEST(Random, Distributions) {
  Generator g(7);
  const int n = 200000;
  Tensor t = Tensor::empty({n});
  auto moments = [&](const Tensor& x) {
    double m = 0, v = 0;
    auto d = x.to_vector();
    for (float f : d) m += f;
    m /= n;
    for (float f : d) v += (f - m) * (f - m);
    return std::pair{m, v / n};
  };
  g.uniform_(t, -1, 3);
  auto [um, uv] = moments(t);
  EXPECT_NEAR(um, 1.0, 0.02);
  EXPECT_NEAR(uv, 16.0 / 12, 0.02);
  g.normal_(t, 2, 0.5);
  auto [nm, nv] = moments(t);
  EXPECT_NEAR(nm, 2.0, 0.01);
  EXPECT_NEAR(nv, 0.25, 0.005);
  g.trunc_normal_(t, 0, 1, -1, 1);
  for (float f : t.to_vector()) ASSERT_TRUE(f >= -1 && f <= 1);
  auto [tm, tv] = moments(t);
  EXPECT_NEAR(tm, 0.0, 0.01);
  EXPECT_NEAR(tv, 0.2911, 0.005);  // variance of N(0,1) truncated to [-1, 1]
  g.bernoulli_(t, 0.3);
  auto [bm, bv] = moments(t);
  EXPECT_NEAR(bm, 0.3, 0.005);
  EXPECT_NEAR(erfinv(std::erf(0.7)), 0.7, 1e-12);
}
