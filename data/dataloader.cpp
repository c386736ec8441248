// DataLoader (see dataloader.h). Worker w builds batches w, w + W, w + 2W, ... into its own
// bounded queue; the consumer takes batch b from queue b % W, so order never depends on
// timing.
#include "data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <exception>
#include <mutex>
#include <thread>

#include "core/common/profiler.h"

namespace booster::data {

namespace {

// Stacks key `key` of every example; keys in `pad` are padded along their first dimension
// to the longest sample's with that value.
Tensor stack_key(const std::vector<Example>& ex, const std::string& key, const std::map<std::string, double>& pad) {
  const Tensor& t0 = ex[0].at(key);
  const auto p = pad.find(key);
  Shape s = t0.shape();
  for (size_t i = 0; i < ex.size(); ++i) {
    auto it = ex[i].find(key);
    BOOSTER_CHECK_T(ValueError, it != ex[i].end() && it->second.defined(), "collate: sample ", i, " has no '", key,
                    "' (sample 0 has {", describe_keys(ex[0]), "}; it has {", describe_keys(ex[i]), "})");
    const Tensor& t = it->second;
    BOOSTER_CHECK_T(DTypeError, t.dtype() == t0.dtype(), "collate: '", key, "' of sample ", i, " is ",
                    dtype_name(t.dtype()), ", sample 0's is ", dtype_name(t0.dtype()));
    const bool same = t.shape() == t0.shape();
    if (p != pad.end() && !same && t.dim() == t0.dim() && t.dim() > 0) {
      Shape rest(t.shape().begin() + 1, t.shape().end()), rest0(t0.shape().begin() + 1, t0.shape().end());
      BOOSTER_CHECK_T(ShapeError, rest == rest0, "collate: '", key, "' of sample ", i, " has shape ", shape_str(t.shape()),
                      ", sample 0's ", shape_str(t0.shape()), ": padding extends the first dimension only");
      s[0] = std::max(s[0], t.size(0));
      continue;
    }
    BOOSTER_CHECK_T(ShapeError, same, "collate: '", key, "' of sample ", i, " has shape ", shape_str(t.shape()),
                    ", sample 0's ", shape_str(t0.shape()),
                    p == pad.end() ? " (give the key a pad value, padding_collate, to pad it)" : "");
  }
  Shape bs{int64_t(ex.size())};
  bs.insert(bs.end(), s.begin(), s.end());
  Tensor x = p == pad.end() ? Tensor::empty(bs, t0.dtype()) : Tensor::full(bs, p->second, t0.dtype());
  for (size_t i = 0; i < ex.size(); ++i) {
    const Tensor& t = ex[i].at(key);
    Tensor row = x.select(0, int64_t(i));
    if (t.dim() > 0 && t.size(0) != s[0]) row = row.narrow(0, 0, t.size(0));
    row.copy_(t);
  }
  return x;
}

Batch collate_with(std::vector<Example>&& examples, const std::map<std::string, double>& pad) {
  BOOSTER_CHECK(!examples.empty(), "collate: empty batch");
  for (size_t i = 1; i < examples.size(); ++i)
    BOOSTER_CHECK_T(ValueError, examples[i].size() == examples[0].size(), "collate: sample ", i, " has keys {",
                    describe_keys(examples[i]), "}, sample 0 has {", describe_keys(examples[0]), "}");
  Batch b;
  for (auto& [key, t] : examples[0]) b[key] = stack_key(examples, key, pad);
  return b;
}

}  // namespace

Batch default_collate(std::vector<Example>&& examples) { return collate_with(std::move(examples), {}); }

Collate padding_collate(std::map<std::string, double> pad_values) {
  return [pad = std::move(pad_values)](std::vector<Example>&& ex) { return collate_with(std::move(ex), pad); };
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
  // Padding rows (a sampler's positions past real_size()) carry the ignore label in every
  // position of their "labels" row.
  const size_t real = sampler_->real_size();
  auto labels = batch.find("labels");
  if (end > real && labels != batch.end() && labels->second.defined() && is_index(labels->second.dtype()) &&
      labels->second.dim() >= 1)
    for (size_t i = std::max(begin, real); i < end; ++i) labels->second.select(0, int64_t(i - begin)).fill_(double(kIgnoreLabel));
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
