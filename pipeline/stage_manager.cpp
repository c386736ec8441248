// PipelineStageManager (see stage_manager.h).
#include "pipeline/stage_manager.h"

#include <algorithm>
#include <numeric>

#include "core/common/check.h"

namespace booster::pipeline {

PipelineStageManager::PipelineStageManager(const dist::ProcessGroup& pp, int num_model_chunks,
                                           std::vector<int64_t> num_layers_per_stage, bool use_zbv)
    : pp_(pp), chunks_(num_model_chunks), zbv_(use_zbv), per_slot_(std::move(num_layers_per_stage)) {
  BOOSTER_CHECK(chunks_ >= 1, "PipelineStageManager: num_model_chunks must be >= 1, got ", chunks_);
  BOOSTER_CHECK(!zbv_ || chunks_ == 2, "PipelineStageManager: use_zbv places two model chunks a stage, got "
                "num_model_chunks ", chunks_);
  if (!per_slot_.empty())
    BOOSTER_CHECK(int64_t(per_slot_.size()) == int64_t(num_stages()) * chunks_,
                  "PipelineStageManager: num_layers_per_stage has ", per_slot_.size(), " entries; it needs one per stage and "
                  "model chunk, pp_size ", num_stages(), " x num_model_chunks ", chunks_, " = ", num_stages() * chunks_);
}

int PipelineStageManager::slot_at(int s, int chunk) const {
  return zbv_ && chunk == 1 ? 2 * num_stages() - 1 - s : s + chunk * num_stages();
}

int PipelineStageManager::stage_of_slot(int slot) const {
  BOOSTER_CHECK(slot >= 0 && slot < num_slots(), "PipelineStageManager: slot ", slot, " out of [0, ", num_slots(), ")");
  const int S = num_stages();
  return zbv_ && slot >= S ? 2 * S - 1 - slot : slot % S;
}

int PipelineStageManager::chunk_of_slot(int slot) const {
  BOOSTER_CHECK(slot >= 0 && slot < num_slots(), "PipelineStageManager: slot ", slot, " out of [0, ", num_slots(), ")");
  return slot / num_stages();
}

bool PipelineStageManager::is_first_stage(int chunk) const { return stage() == 0 && chunk <= 0; }
bool PipelineStageManager::is_last_stage(int chunk) const {
  const int last_slot = num_slots() - 1;
  return stage() == stage_of_slot(last_slot) && (chunk < 0 || chunk == chunk_of_slot(last_slot));
}

std::vector<int64_t> PipelineStageManager::distribute_layers(int64_t n) const {
  const int64_t slots = int64_t(num_stages()) * chunks_;
  if (!per_slot_.empty()) {
    const int64_t sum = std::accumulate(per_slot_.begin(), per_slot_.end(), int64_t(0));
    BOOSTER_CHECK(sum == n, "PipelineStageManager: num_layers_per_stage sums to ", sum, " but the model has ", n,
                  " layers");
    for (int64_t k : per_slot_)
      BOOSTER_CHECK(k >= 0, "PipelineStageManager: num_layers_per_stage has a negative entry ", k);
    return per_slot_;
  }
  BOOSTER_CHECK(n >= slots, "PipelineStageManager: a model of ", n, " layers cannot fill pp_size ", num_stages(),
                " x num_model_chunks ", chunks_, " = ", slots, " stage chunks");
  std::vector<int64_t> out(size_t(slots), n / slots);
  const int64_t r = n % slots, start = slots / 2 - r / 2;
  for (int64_t i = 0; i < r; ++i) ++out[size_t(start + i)];
  return out;
}

nn::StageSpec PipelineStageManager::stage_spec(int64_t n, int chunk) const {
  BOOSTER_CHECK(chunk >= 0 && chunk < chunks_, "PipelineStageManager: chunk ", chunk, " out of [0, ", chunks_, ")");
  return slot_spec(n, slot_of(chunk));
}

nn::StageSpec PipelineStageManager::slot_spec(int64_t n, int slot_in) const {
  BOOSTER_CHECK(slot_in >= 0 && slot_in < num_slots(), "PipelineStageManager: slot ", slot_in, " out of [0, ", num_slots(), ")");
  const auto per = distribute_layers(n);
  const size_t slot = size_t(slot_in);
  nn::StageSpec s;
  s.layer_begin = std::accumulate(per.begin(), per.begin() + std::ptrdiff_t(slot), int64_t(0));
  s.layer_end = s.layer_begin + per[slot];
  s.first = slot == 0;
  s.last = slot + 1 == per.size();
  return s;
}

std::vector<int64_t> partition_balanced(const std::vector<int64_t>& w, int parts) {
  const int64_t n = int64_t(w.size());
  BOOSTER_CHECK(parts >= 1 && n >= parts, "partition_balanced: ", n, " layers cannot fill ", parts, " parts");
  // The smallest cap for which a greedy left-to-right cut needs at most `parts` parts
  // (binary search over the cap; each part keeps at least one layer).
  auto parts_needed = [&](int64_t cap, std::vector<int64_t>* sizes) {
    int used = 0;
    for (int64_t i = 0; i < n; ++used) {
      // Leave at least one layer for each part still to come.
      const int64_t max_take = n - i - std::max<int64_t>(parts - used - 1, 0);
      int64_t sum = w[size_t(i)], k = 1;
      while (k < max_take && sum + w[size_t(i + k)] <= cap) sum += w[size_t(i + k++)];
      if (sizes) sizes->push_back(k);
      i += k;
    }
    return used;
  };
  int64_t lo = *std::max_element(w.begin(), w.end()), hi = std::accumulate(w.begin(), w.end(), int64_t(0));
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (parts_needed(mid, nullptr) <= parts) hi = mid;
    else lo = mid + 1;
  }
  std::vector<int64_t> sizes;
  parts_needed(lo, &sizes);
  // Fewer parts than asked (a cap reached early): split the largest parts further.
  while (int(sizes.size()) < parts) {
    auto it = std::max_element(sizes.begin(), sizes.end());
    const int64_t k = *it;
    *it = k - k / 2;
    sizes.insert(it + 1, k / 2);
  }
  return sizes;
}

}  // namespace booster::pipeline
