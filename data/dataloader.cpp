// DataLoader (see dataloader.h). Worker w builds batches w, w + W, w + 2W, ... into its own
// bounded queue; the consumer takes batch b from queue b % W, so order never depends on
// timing.
#include "data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/common/profiler.h"

namespace booster::data {

Batch default_collate(std::vector<Example>&& examples) {
  BOOSTER_CHECK(!examples.empty(), "collate: empty batch");
  const Shape s = examples[0].pixel_values.shape();
  Shape bs{int64_t(examples.size())};
  bs.insert(bs.end(), s.begin(), s.end());
  Tensor x = Tensor::empty(bs);
  std::vector<int64_t> labels;
  for (size_t i = 0; i < examples.size(); ++i) {
    BOOSTER_CHECK_T(ShapeError, examples[i].pixel_values.shape() == s, "collate: sample ", i, " has shape ",
                    shape_str(examples[i].pixel_values.shape()), ", sample 0 has ", shape_str(s));
    x.select(0, int64_t(i)).copy_(examples[i].pixel_values);
    labels.push_back(examples[i].label);
  }
  return Batch{x, Tensor::from_ints(labels, {int64_t(labels.size())})};
}

class DataLoader::Pass {
 public:
  Pass(const DataLoader& dl, size_t first, size_t count) : dl_(dl), queues_(size_t(dl.opts_.num_workers)) {
    for (int w = 0; w < dl.opts_.num_workers; ++w)
      threads_.emplace_back([this, w, first, count] { work(w, first, count); });
  }
  ~Pass() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Batch take(size_t b, size_t first) {
    auto& q = queues_[(b - first) % queues_.size()];
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !q.empty(); });
    Item it = std::move(q.front());
    q.pop_front();
    cv_.notify_all();
    if (it.error) std::rethrow_exception(it.error);
    return std::move(it.batch);
  }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };
  void work(int w, size_t first, size_t count) {
    const size_t nw = queues_.size();
    for (size_t k = size_t(w); k < count; k += nw) {
      Item it;
      try {
        it.batch = dl_.make_batch(first + k);
      } catch (...) {
        it.error = std::current_exception();
      }
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || queues_[size_t(w)].size() < size_t(std::max(1, dl_.opts_.prefetch_factor)); });
      if (stop_) return;
      queues_[size_t(w)].push_back(std::move(it));
      cv_.notify_all();
    }
  }
  const DataLoader& dl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Item>> queues_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts, std::shared_ptr<Sampler> sampler,
                       Collate collate)
    : dataset_(std::move(dataset)), opts_(opts), sampler_(std::move(sampler)), collate_(std::move(collate)) {
  BOOSTER_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  BOOSTER_CHECK(opts_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opts_.batch_size);
  BOOSTER_CHECK(opts_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", opts_.num_workers);
  if (!sampler_) {
    if (opts_.shuffle) sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opts_.seed);
    else sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  if (!collate_) collate_ = default_collate;
}

DataLoader::~DataLoader() = default;

size_t DataLoader::size() const {
  const size_t n = sampler_->size(), b = size_t(opts_.batch_size);
  return opts_.drop_last ? n / b : (n + b - 1) / b;
}

Batch DataLoader::make_batch(size_t b) const {
  ProfileScope prof("dataloader batch");
  const size_t begin = b * size_t(opts_.batch_size), end = std::min(order_.size(), begin + size_t(opts_.batch_size));
  std::vector<Example> ex;
  for (size_t i = begin; i < end; ++i) {
    // Seeded by (seed, epoch, sample): the same augmentation whatever thread runs it.
    Generator g(opts_.seed, (uint64_t(epoch_) << 32) ^ uint64_t(order_[i]));
    ex.push_back(dataset_->get(order_[i], g));
  }
  Batch batch = collate_(std::move(ex));
  // Padding rows (a sampler's positions past real_size()) carry the ignore label.
  const size_t real = sampler_->real_size();
  if (end > real && batch.labels.defined() && batch.labels.dtype() == DType::i64 && batch.labels.dim() == 1)
    for (size_t i = std::max(begin, real); i < end; ++i) batch.labels.data<int64_t>()[i - begin] = kIgnoreLabel;
  return batch;
}

void DataLoader::begin_epoch() {
  pass_.reset();
  order_ = sampler_->indices(epoch_);
  next_batch_ = std::min(start_batch_, size());
  start_batch_ = 0;
  if (opts_.num_workers > 0) pass_ = std::make_unique<Pass>(*this, next_batch_, size() - next_batch_);
  first_batch_ = next_batch_;
}

std::optional<Batch> DataLoader::next() {
  if (order_.empty() && next_batch_ == 0 && !pass_) begin_epoch();
  if (next_batch_ >= size()) {
    pass_.reset();
    order_.clear();
    next_batch_ = 0;
    ++epoch_;
    return std::nullopt;
  }
  Batch b = pass_ ? pass_->take(next_batch_, first_batch_) : make_batch(next_batch_);
  ++next_batch_;
  return b;
}

}  // namespace booster::data
