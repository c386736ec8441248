// Samplers (coverage, disjointness, padding) and DataLoader determinism across workers.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "core/kernels/ops.h"
#include "data/dataloader.h"

using namespace booster;
using namespace booster::data;

namespace {

// A dataset whose sample i is a 1x2x2 image holding i plus augmentation noise.
class Synthetic : public Dataset {
 public:
  explicit Synthetic(size_t n) : n_(n) {}
  size_t size() const override { return n_; }
  Example get(size_t i, Generator& g) const override {
    if (i == 13 && fail_13) throw std::runtime_error("sample 13 is broken");
    Tensor t = Tensor::full({1, 2, 2}, double(i));
    Tensor noise = Tensor::empty({1, 2, 2});
    g.uniform_(noise);
    return image_example(add(t, noise), int64_t(i % 3));
  }
  bool fail_13 = false;

 private:
  size_t n_;
};

std::vector<std::vector<float>> run_epoch(DataLoader& dl) {
  std::vector<std::vector<float>> out;
  while (auto b = dl.next()) out.push_back(b->at("pixel_values").to_vector());
  return out;
}

}  // namespace

TEST(DistributedSampler, CoverageAndDisjointness) {
  for (size_t n : {10u, 11u, 7u}) {
    for (int replicas = 1; replicas <= 4; ++replicas) {
      for (bool drop_last : {false, true}) {
        std::vector<size_t> all;
        size_t per = 0;
        for (int r = 0; r < replicas; ++r) {
          DistributedSampler s(n, replicas, r, true, 5, drop_last);
          auto idx = s.indices(3);
          ASSERT_EQ(idx.size(), s.size());
          if (r == 0) per = idx.size();
          ASSERT_EQ(idx.size(), per) << "slices must be equal-sized";
          all.insert(all.end(), idx.begin(), idx.end());
        }
        std::set<size_t> uniq(all.begin(), all.end());
        if (drop_last) {
          EXPECT_EQ(per, n / size_t(replicas));
          EXPECT_EQ(uniq.size(), all.size()) << "drop_last slices are disjoint";
        } else {
          EXPECT_EQ(per, (n + size_t(replicas) - 1) / size_t(replicas));
          EXPECT_EQ(uniq.size(), n) << "every sample is covered";
          EXPECT_EQ(all.size() - n, per * size_t(replicas) - n) << "padding only by repetition";
        }
      }
    }
  }
  DistributedSampler a(10, 2, 0, true, 5), b(10, 2, 0, true, 5);
  EXPECT_EQ(a.indices(1), b.indices(1));
  EXPECT_NE(a.indices(1), a.indices(2));  // set_epoch reshuffles
  EXPECT_EQ(DistributedSampler(4, 2, 1, false).indices(0), (std::vector<size_t>{1, 3}));
  EXPECT_THROW(DistributedSampler(4, 2, 2), ValueError);
}

// Every sample once over the ranks; every rank as many batches (a short slice padded with
// rows labelled kIgnoreLabel), so a sharded model's forward pairs its collectives.
TEST(InferenceShardSampler, EqualBatchCountsWithIgnoredPadding) {
  for (size_t n : {0, 1, 5, 105}) {
    for (int replicas : {1, 2, 4}) {
      std::multiset<int64_t> seen;
      std::set<size_t> batches;
      for (int r = 0; r < replicas; ++r) {
        DataLoaderOptions o;
        o.batch_size = 4;
        DataLoader dl(std::make_shared<Synthetic>(n), o, std::make_shared<InferenceShardSampler>(n, replicas, r));
        batches.insert(dl.size());
        dl.begin_epoch();
        while (auto b = dl.next()) {
          auto labels = b->at("labels").to_int_vector();
          auto px = b->at("pixel_values").to_vector();
          for (size_t k = 0; k < labels.size(); ++k) {
            if (labels[k] == kIgnoreLabel) continue;
            const auto sample = int64_t(px[k * 4]);  // sample i's pixels hold i plus noise in [0, 1)
            EXPECT_EQ(labels[k], sample % 3);
            seen.insert(sample);
          }
        }
      }
      EXPECT_EQ(batches.size(), 1u) << n << " samples over " << replicas;
      ASSERT_EQ(seen.size(), n) << n << " samples over " << replicas;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(int64_t(i)), 1u) << i;
    }
  }
}

TEST(DataLoader, DeterministicAcrossWorkerCounts) {
  auto ds = std::make_shared<Synthetic>(23);
  std::vector<std::vector<float>> ref;
  for (int workers : {0, 1, 3}) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.shuffle = true;
    o.num_workers = workers;
    o.seed = 9;
    DataLoader dl(ds, o);
    EXPECT_EQ(dl.size(), 6u);
    auto e0 = run_epoch(dl);
    auto e1 = run_epoch(dl);  // the next epoch is a new order
    EXPECT_EQ(e0.size(), 6u);
    EXPECT_NE(e0, e1);
    if (ref.empty()) ref = e0;
    EXPECT_EQ(e0, ref) << "workers=" << workers;
  }
}

TEST(DataLoader, DropLastResumeAndWorkerErrors) {
  auto ds = std::make_shared<Synthetic>(23);
  DataLoaderOptions o;
  o.batch_size = 4;
  o.drop_last = true;
  o.num_workers = 2;
  DataLoader dl(ds, o);
  EXPECT_EQ(dl.size(), 5u);
  auto full = run_epoch(dl);
  dl.set_epoch(0);
  dl.set_start_batch(3);
  auto tail = run_epoch(dl);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], full[3]);
  ds->fail_13 = true;
  DataLoader bad(ds, o);
  EXPECT_EQ(bad.next()->at("pixel_values").size(0), 4);
  bad.next();
  bad.next();
  try {
    bad.next();  // batch 3 holds sample 13
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 13"), std::string::npos);
  }
}
