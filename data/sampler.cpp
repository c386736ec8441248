// Samplers (see sampler.h).
#include "data/sampler.h"

#include <numeric>

#include "core/common/check.h"
#include "core/tensor/random.h"

namespace booster::data {

std::vector<size_t> random_permutation(size_t n, uint64_t seed, uint64_t stream) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t(0));
  Generator g(seed, stream);
  for (size_t i = n; i > 1; --i) std::swap(p[i - 1], p[g.next_u64() % i]);  // Fisher-Yates
  return p;
}

std::vector<size_t> SequentialSampler::indices(int64_t) const {
  std::vector<size_t> p(n_);
  std::iota(p.begin(), p.end(), size_t(0));
  return p;
}

std::vector<size_t> RandomSampler::indices(int64_t epoch) const { return random_permutation(n_, seed_, uint64_t(epoch)); }

DistributedSampler::DistributedSampler(size_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  BOOSTER_CHECK(num_replicas > 0 && rank >= 0 && rank < num_replicas, "DistributedSampler: invalid rank ", rank,
                ", should be in [0, ", num_replicas - 1, "]");
  const size_t r = size_t(num_replicas);
  // PyTorch: ceil((n - r) / r) when dropping an uneven tail (= floor(n / r)), else ceil(n / r).
  num_samples_ = drop_last ? n_ / r : (n_ + r - 1) / r;
  total_size_ = num_samples_ * r;
}

std::vector<size_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<size_t> idx = shuffle_ ? random_permutation(n_, seed_, uint64_t(epoch)) : SequentialSampler(n_).indices(0);
  if (!drop_last_) {
    const size_t base = idx.size();
    for (size_t i = 0; idx.size() < total_size_ && base > 0; ++i) idx.push_back(idx[i % base]);
  } else {
    idx.resize(total_size_);
  }
  std::vector<size_t> mine;
  for (size_t i = size_t(rank_); i < total_size_; i += size_t(num_replicas_)) mine.push_back(idx[i]);
  return mine;
}

}  // namespace booster::data

namespace booster::data {

InferenceShardSampler::InferenceShardSampler(size_t dataset_size, int num_replicas, int rank)
    : n_(dataset_size), num_replicas_(num_replicas), rank_(rank) {
  BOOSTER_CHECK(num_replicas > 0 && rank >= 0 && rank < num_replicas, "InferenceShardSampler: invalid rank ", rank);
}

std::vector<size_t> InferenceShardSampler::indices(int64_t) const {
  std::vector<size_t> out;
  for (size_t i = size_t(rank_); i < n_; i += size_t(num_replicas_)) out.push_back(i);
  while (out.size() < size()) out.push_back(out.empty() ? 0 : out.back());  // padding: counted by no one
  return out;
}

size_t InferenceShardSampler::size() const { return (n_ + size_t(num_replicas_) - 1) / size_t(num_replicas_); }

size_t InferenceShardSampler::real_size() const {
  return n_ > size_t(rank_) ? (n_ - size_t(rank_) + size_t(num_replicas_) - 1) / size_t(num_replicas_) : 0;
}

}  // namespace booster::data
