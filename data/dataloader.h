// DataLoader: batches of named tensors (each key of the samples stacked along a new first
// dimension: {pixel_values [B, 3, H, W] f32, labels [B] i64} for images, {input_ids [B, T],
// labels [B, T]} for tokens), decoded and transformed on worker threads with a bounded
// prefetch queue. Each sample's augmentation
// draws from a generator seeded by (seed, epoch, index), so batches are identical for any
// number of workers. An exception in a worker reaches the consumer at that batch.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "data/dataset.h"
#include "data/sampler.h"

namespace booster::data {

/// A batch: every key of its samples, stacked (Hugging Face's names: "pixel_values",
/// "input_ids", "attention_mask", "labels").
using Batch = TensorMap;

/// Stacks examples into a batch.
using Collate = std::function<Batch(std::vector<Example>&&)>;
/// The default collate: every key stacked along a new first dimension (torch's
/// default_collate). Every sample must have the same keys, and each key one shape and dtype:
/// an error names the key, the sample and what sample 0 has.
Batch default_collate(std::vector<Example>&& examples);
/// A collate that pads the keys of `pad_values` along their first dimension to the longest
/// sample's length with that value (transformers' DataCollatorWithPadding: input_ids with
/// the pad token, attention_mask with 0, labels with -100 so the loss skips them); other
/// keys stack as default_collate's.
Collate padding_collate(std::map<std::string, double> pad_values);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;      // 0: load on the calling thread
  uint64_t seed = 1024;
  int prefetch_factor = 2;  // batches queued per worker
};

class DataLoader {
 public:
  /// Without a sampler: sequential, or a RandomSampler(seed) when shuffle.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts, std::shared_ptr<Sampler> sampler = nullptr,
             Collate collate = default_collate);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch.
  size_t size() const;
  /// Sets the epoch of the next pass (sampler order and augmentation); otherwise each
  /// completed pass advances it by one.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// Starts the next pass at batch `k` (resuming mid-epoch).
  void set_start_batch(size_t k) { start_batch_ = k; }

  /// Starts a pass (workers begin prefetching).
  void begin_epoch();
  /// The next batch of the pass, or nullopt at its end (the epoch then advances).
  std::optional<Batch> next();
  /// Batches handed out so far in this pass (counting a resume offset).
  size_t position() const { return next_batch_; }

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return opts_; }
  Sampler& sampler() { return *sampler_; }

 private:
  class Pass;
  Batch make_batch(size_t b) const;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions opts_;
  std::shared_ptr<Sampler> sampler_;
  Collate collate_;
  int64_t epoch_ = 0;
  size_t start_batch_ = 0, next_batch_ = 0, first_batch_ = 0;
  std::vector<size_t> order_;
  std::unique_ptr<Pass> pass_;
};

}  // namespace booster::data
