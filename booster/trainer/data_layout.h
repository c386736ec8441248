// A run's data layout (replicas x rows a batch x accumulation over a dataset) and what a
// resume on another one needs: progress counted in samples, the global batch kept. Under
// DistributedSampler's order (one permutation an epoch, rank r taking every R-th index) the
// samples consumed after k batches on every rank are the first k x R x B of the epoch's
// permutation whatever R and B are, so a run with the same global batch R x B x K continues
// over the same samples, each optimizer step over the same set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace booster::proto {
class DataLayout;
class TrainingProgress;
}  // namespace booster::proto

namespace booster {

struct DataLayout {
  int64_t dp_size = 1, batch_size = 1, gradient_accumulation = 1;
  int64_t dataset_size = 0;     // training samples an epoch draws from
  int64_t steps_per_epoch = 0;  // optimizer steps an epoch
  int64_t global_batch() const { return dp_size * batch_size * gradient_accumulation; }
  /// "2 replicas x 8 rows x 1 accumulation (global batch 16)".
  std::string describe() const;
  proto::DataLayout to_proto() const;
  static DataLayout from_proto(const proto::DataLayout& p);
};

/// Where a resumed run starts, in this run's iterations and batches.
struct ResumePoint {
  int64_t epoch = 0, step = 0, position = 0;
  bool relaid = false;  // the checkpoint's layout differs from this run's
};

/// The resume point of a checkpoint's progress under this run's layout. The same layout:
/// as saved. Another one with the same global batch, dataset and optimizer steps an epoch:
/// the same optimizer steps and samples consumed, in this layout's iterations and batches.
/// Otherwise a ValueError naming both layouts and what differs (the learning-rate schedule
/// and the data order hold only for the same global batch over the same samples). A
/// checkpoint that recorded no layout (written before layouts were) resumes as saved.
ResumePoint resume_point(const proto::TrainingProgress& p, const DataLayout& now);

/// A replica's batch and accumulation that keep the global batch `global` on dp_size
/// replicas: the accumulation makes up for fewer replicas where it can with `batch_size`
/// rows; else the largest batch below batch_size that divides global / dp_size (more
/// replicas). A ValueError when global does not divide over dp_size.
struct BatchPlan {
  int64_t batch_size = 1, gradient_accumulation = 1;
};
BatchPlan batch_keeping(int64_t global, int64_t dp_size, int64_t batch_size);

/// The layout the newest complete checkpoint under `resume` (a step folder or its parent)
/// recorded; nullopt when it recorded none. An IOError when there is no complete checkpoint.
std::optional<DataLayout> saved_layout(const std::string& resume);

}  // namespace booster
