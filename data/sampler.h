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
  /// Positions of an epoch's indices at or past this one are padding: there only so that
  /// every rank runs as many batches (the collectives of a sharded model's forward must
  /// pair up), not to be counted. The DataLoader gives their rows the label kIgnoreLabel.
  virtual size_t real_size() const { return size(); }
};

/// The label of a padding row (PyTorch's ignore_index: cross_entropy skips it).
constexpr int64_t kIgnoreLabel = -100;

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

/// For evaluation: rank r takes indices r, r + R, r + 2R, ..., so every sample is counted
/// exactly once over all ranks. The slices may differ by one sample; a short slice is padded
/// with its last index (past real_size(), labelled kIgnoreLabel), so every rank runs the same
/// number of batches: a ZeRO-3 or Gemini forward gathers its parameters with all the ranks.
class InferenceShardSampler : public Sampler {
 public:
  InferenceShardSampler(size_t dataset_size, int num_replicas, int rank);
  std::vector<size_t> indices(int64_t) const override;
  size_t size() const override;
  size_t real_size() const override;

 private:
  size_t n_;
  int num_replicas_, rank_;
};

/// A uniform random permutation of 0..n-1 from (seed, stream).
std::vector<size_t> random_permutation(size_t n, uint64_t seed, uint64_t stream);

}  // namespace booster::data
