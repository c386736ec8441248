// Samplers: which dataset indices an epoch visits, in what order, on this rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace booster::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of `epoch`.
  virtual std::vector<size_t> indices(int64_t epoch) const = 0;
  /// Number of indices per epoch.
  virtual size_t size() const = 0;
};

/// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(size_t n) : n_(n) {}
  std::vector<size_t> indices(int64_t) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
};

/// A permutation drawn from (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(size_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<size_t> indices(int64_t epoch) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
  uint64_t seed_;
};

/// PyTorch's DistributedSampler: a permutation from (seed, epoch) shared by all ranks,
/// padded by repetition to a multiple of num_replicas (or cut with drop_last), then rank
/// r takes every num_replicas-th index starting at r: disjoint, equal-sized slices.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(size_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<size_t> indices(int64_t epoch) const override;
  size_t size() const override { return num_samples_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  size_t n_;
  int num_replicas_, rank_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  size_t num_samples_, total_size_;
};

/// For evaluation: rank r takes indices r, r + R, r + 2R, ... with no padding, so every
/// sample is counted exactly once over all ranks (slices may differ by one).
class InferenceShardSampler : public Sampler {
 public:
  InferenceShardSampler(size_t dataset_size, int num_replicas, int rank);
  std::vector<size_t> indices(int64_t) const override;
  size_t size() const override;

 private:
  size_t n_;
  int num_replicas_, rank_;
};

/// A uniform random permutation of 0..n-1 from (seed, stream).
std::vector<size_t> random_permutation(size_t n, uint64_t seed, uint64_t stream);

}  // namespace booster::data
