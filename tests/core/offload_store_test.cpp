// The disk tier: values survive the round trip through the file, RAM holds only what is
// fetched, writes land before later reads, bytes are accounted, and a bad folder is a
// clear error.
#include <gtest/gtest.h>

#include "core/tensor/offload_store.h"

using namespace booster;

TEST(OffloadStore, RoundTripsThroughDiskWithAWindowInRam) {
  const size_t disk_before = disk_tier().bytes_in_use();
  std::vector<int64_t> ids;
  {
    OffloadStore store("", /*max_inflight_writes=*/4000);
    for (int i = 0; i < 8; ++i) ids.push_back(store.put(Tensor::full({1000}, double(i), i % 2 ? DType::bf16 : DType::f32)));
    store.flush();
    EXPECT_GE(store.disk_bytes(), 4 * 1000 * 4 + 4 * 1000 * 2);
    EXPECT_EQ(disk_tier().bytes_in_use() - disk_before, store.disk_bytes());
    const size_t ram_before = host_tier().bytes_in_use();
    // Walk the slots with one read ahead: RAM holds two slots and at most 4000 bytes of
    // write-behind.
    size_t most = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size()) store.prefetch(ids[i + 1]);
      Tensor t = store.get(ids[i]);
      EXPECT_EQ(t.to_vector()[999], float(i));
      t.fill_(double(i) + 0.5);  // updated in RAM, written back behind
      store.release(ids[i], true);
      most = std::max(most, host_tier().bytes_in_use() - ram_before);
    }
    store.flush();
    EXPECT_LE(most, size_t(2 * 4000 + 2 * 4000 + 1024));
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(store.get(ids[i]).to_vector()[0], float(i) + 0.5f) << i;
      store.release(ids[i], false);
    }
    EXPECT_GE(store.bytes_written(), store.disk_bytes());
    EXPECT_GE(store.bytes_read(), 2 * (4 * 4000 + 4 * 2000));
  }
  EXPECT_EQ(disk_tier().bytes_in_use(), disk_before);  // the store's file is gone
  try {
    OffloadStore bad("/proc/no_such_dir");
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no_such_dir"), std::string::npos) << e.what();
  }
}

// Placement moves a slot between the tiers: pinned, get and release cost no IO and a
// change stays in RAM; unpinned, it is written once and RAM lets go. assign overwrites a
// slot without reading it.
TEST(OffloadStore, PinKeepsASlotInRamUntilUnpinned) {
  OffloadStore store;
  const int64_t a = store.put(Tensor::full({1000}, 1.0), /*pinned=*/true);
  const int64_t b = store.put(Tensor::full({1000}, 2.0));
  store.flush();
  EXPECT_TRUE(store.pinned(a));
  EXPECT_EQ(store.bytes_written(), 4000u);  // only b went to the file
  EXPECT_EQ(store.slot_bytes(a), 4000u);
  const size_t ram = host_tier().bytes_in_use();
  for (int k = 0; k < 3; ++k) {
    Tensor t = store.get(a);
    t.copy_(Tensor::full({1000}, double(k) + 2.0));
    store.release(a, true);
  }
  store.flush();
  EXPECT_EQ(store.bytes_written(), 4000u);  // a changed in RAM only
  EXPECT_EQ(store.bytes_read(), 0u);
  EXPECT_EQ(host_tier().bytes_in_use(), ram);  // a's copy is the same RAM throughout
  store.unpin(a);
  store.flush();
  EXPECT_EQ(store.bytes_written(), 8000u);
  EXPECT_EQ(host_tier().bytes_in_use(), ram - 4000);
  EXPECT_EQ(store.get(a).to_vector()[7], 4.0f);  // read back from the file
  store.release(a, false);
  store.pin(b);
  store.flush();
  EXPECT_EQ(store.bytes_read(), 8000u);
  store.assign(b, Tensor::full({10, 100}, 5.0, DType::bf16));  // into the pinned copy, converted
  store.unpin(b);
  store.assign(a, Tensor::full({1000}, 6.0));  // not in RAM: written without a read
  store.flush();
  EXPECT_EQ(store.bytes_read(), 8000u);
  EXPECT_EQ(store.get(b).to_vector()[999], 5.0f);
  EXPECT_EQ(store.get(a).to_vector()[0], 6.0f);
  store.release(a, false);
  store.assign(a, Tensor::full({1000}, 7.0), /*owned=*/true);  // given up: written as it is
  store.flush();
  EXPECT_EQ(store.get(a).to_vector()[0], 7.0f);
  store.release(a, false);
  EXPECT_THROW(store.assign(a, Tensor::full({3}, 1.0)), ShapeError);
}
