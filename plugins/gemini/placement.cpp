// Gemini's auto placement (see placement.h).
#include "plugins/gemini/placement.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"

namespace booster::plugins {

size_t resolve_memory_cap(double memory_cap_mb) {
  const double MB = double(1 << 20);
  if (memory_cap_mb > 0) return size_t(memory_cap_mb * MB);
  if (const char* env = std::getenv("BOOSTER_MEMORY_CAP_MB"); env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    BOOSTER_CHECK(end && *end == '\0' && v > 0, "BOOSTER_MEMORY_CAP_MB must be a positive number of MB, got '", env, "'");
    return size_t(v * MB);
  }
  const double ram = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  return size_t(ram / std::max(1, dist::local_size()));
}

size_t limit_host_footprint(size_t cap) {
  const size_t footprint = host_tier().bytes_in_use() + host_tier().bytes_cached(), rss = resident_set_bytes();
  const size_t untracked = rss > footprint ? rss - footprint : 0;
  host_tier().set_footprint_limit(cap > untracked ? cap - untracked : 1);
  return untracked;
}

AutoPlacement::AutoPlacement(zero::Engine& engine, zero::LowLevelZeroOptimizer& opt, size_t cap, double warmup_ratio,
                             double steady_ratio)
    : eng_(engine), layout_(engine.layout()), opt_(opt), warmup_ratio_(warmup_ratio), steady_ratio_(steady_ratio) {
  BOOSTER_CHECK(eng_.shards().store(), "AutoPlacement: the ZeRO engine has no disk tier");
  stats_.cap = cap;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) stats_.model_bytes += chunk_bytes(b);
  // Idle cached blocks are resident memory too: the host tier keeps them only under the cap
  // (less what the process holds outside the tier), from the warm-up step on.
  // The host tier's idle cache is held to what placement plans for in use (steady_cuda_cap_ratio
  // of the cap): the rest of the cap is headroom for memory outside the tier that comes and
  // goes within a step (MPI's and oneDNN's buffers), which the resident set counts too.
  check_cap_at_boost(limit_host_footprint(size_t(steady_ratio_ * double(cap))));
  // Warm-up: warmup_non_model_data_ratio of the cap is left to what is not model data.
  place(double(cap) * (1.0 - warmup_ratio_));
  host_tier().reset_peak();
}

AutoPlacement::~AutoPlacement() { host_tier().set_footprint_limit(0); }

void AutoPlacement::check_cap_at_boost(size_t untracked) const {
  // However the chunks are placed, a step holds one chunk gathered whole while its modules
  // run, and brings one chunk's step state (slice, master, gradient shard, optimizer states)
  // into RAM to update it, beside what the process holds outside its tensors. The
  // activations are measured by the warm-up step and checked there.
  size_t chunk = 0, gathered = 0;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    size_t whole = 0;
    for (size_t i : layout_.buckets()[b]) whole += size_t(layout_.parts()[i].numel) * dtype_size(eng_.shards().working_dtype());
    if (whole + chunk_bytes(b, true) > gathered + chunk) gathered = whole, chunk = chunk_bytes(b, true);
  }
  double need = double(gathered + chunk + untracked);
  const auto& dp = layout_.group();
  if (dp.size() > 1) need = dist::all_reduce_scalar(need, dist::ReduceOp::max, dp);  // every rank decides alike
  const double MB = double(1 << 20);
  BOOSTER_CHECK_T(BackendError, double(stats_.cap) >= need, "GeminiPlugin (placement_policy auto): the memory cap ",
                  double(stats_.cap) / MB, " MB (memory_cap_mb or BOOSTER_MEMORY_CAP_MB) is below the ", need / MB,
                  " MB a step needs however the chunks are placed: the largest chunk gathered (", double(gathered) / MB,
                  " MB) and its step state (", double(chunk) / MB, " MB) beside what the process holds outside its "
                  "tensors (", double(untracked) / MB, " MB, on the rank holding most), before any activation; raise the "
                  "cap, or make the chunks smaller (chunk_config_dict.chunk_size, min_chunk_size_m)");
}

size_t AutoPlacement::chunk_bytes(size_t b, bool with_step_state) const {
  size_t n = 0;
  for (size_t i : layout_.buckets()[b]) {
    const auto& p = layout_.parts()[i];
    n += size_t(p.n) * (dtype_size(eng_.shards().working_dtype()) + 4);  // slice and master
    if (!with_step_state) continue;
    n += size_t(p.n) * 4;  // gradient shard
    const auto& states = opt_.state_slots(i);
    if (states.empty()) n += size_t(p.n) * 4 * size_t(opt_.unwrap()->state_buffers());  // as planned
    for (auto& [k, id] : states) n += eng_.shards().store()->slot_bytes(id);
  }
  return n;
}

bool AutoPlacement::resident(size_t b) const {
  const auto& ids = layout_.buckets().at(b);
  return std::all_of(ids.begin(), ids.end(), [&](size_t i) { return eng_.shards().at(i).resident; });
}

void AutoPlacement::set_resident(size_t b, bool on) {
  OffloadStore& store = *eng_.shards().store();
  auto pin = [&](int64_t id) {
    if (id < 0) return;
    if (on) store.pin(id);
    else store.unpin(id);
  };
  for (size_t i : layout_.buckets()[b]) {
    zero::Shard& s = eng_.shards().at(i);
    if (s.resident == on) continue;  // after a repacking a chunk may be partly resident
    s.resident = on;
    pin(s.own_slot);
    pin(s.master_slot);
    pin(eng_.grads().slot(i));
    for (auto& [k, id] : opt_.state_slots(i)) pin(id);
  }
  ++(on ? stats_.moves_in : stats_.moves_out);
}

void AutoPlacement::place(double budget) {
  stats_.chunks = layout_.buckets().size();  // Gemini packs them again after the first step
  // The forward uses the last chunk first (chunks are packed from the last parameters).
  std::vector<bool> want(layout_.buckets().size(), false);
  double used = 0;
  for (size_t b = want.size(); b-- > 0;) {
    const double n = double(chunk_bytes(b));
    if (used + n > budget) continue;  // a smaller chunk further on may fit
    want[b] = true;
    used += n;
  }
  const auto& ids = layout_.buckets();
  for (size_t b = 0; b < want.size(); ++b)  // out first: RAM is freed before it is taken
    if (!want[b] && std::any_of(ids[b].begin(), ids[b].end(), [&](size_t i) { return eng_.shards().at(i).resident; }))
      set_resident(b, false);
  for (size_t b = 0; b < want.size(); ++b)
    if (!resident(b) && want[b]) set_resident(b, true);
  stats_.resident_bytes = size_t(used);
  stats_.resident_chunks = size_t(std::count(want.begin(), want.end(), true));
}

void AutoPlacement::after_step() {
  ++stats_.steps;
  // What stayed resident through the step: in the warm-up step the gradient shards and the
  // optimizer states were created as it went, so only the slices and masters count there
  // (the measurement errs towards more non-model memory).
  size_t held = 0;
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    if (resident(b)) held += chunk_bytes(b, /*with_step_state=*/stats_.steps > 1);
  const size_t peak = host_tier().peak_bytes();
  stats_.last_peak = peak;
  // Memory outside the host tier counts against the cap too: libraries' pages, oneDNN's
  // scratchpads, MPI's buffers, small blocks from malloc (the resident set beyond the
  // tier's blocks in use and cached).
  stats_.untracked = limit_host_footprint(size_t(steady_ratio_ * double(stats_.cap)));
  double non_model = double(peak > held ? peak - held : 0) + double(stats_.untracked);
  const auto& dp = layout_.group();
  if (dp.size() > 1) non_model = dist::all_reduce_scalar(non_model, dist::ReduceOp::max, dp);
  // The first step records the order Gemini packs the chunks in (they are packed again after
  // it), the second the order prefetching follows: only the third runs as every later step
  // (read-ahead on). Until it is measured the warm-up placement is not exceeded, and its figure is the
  // first steady one (the warm-up steps' figures err low by the prefetched chunks, high by
  // the optimizer states created as the first step went).
  constexpr int kWarmupSteps = 2;
  steady_peak_ = stats_.steps <= kWarmupSteps + 1 ? size_t(non_model) : std::max(steady_peak_, size_t(non_model));
  stats_.non_model_peak = steady_peak_;
  const double budget = steady_ratio_ * double(stats_.cap) - double(steady_peak_);
  const double MB = double(1 << 20);
  BOOSTER_CHECK_T(BackendError, budget >= 0 || stats_.steps == 1, "GeminiPlugin (placement_policy auto): the memory that is not model data "
                  "(activations, gathered chunks, gradients in flight, the disk tier's buffers, everything else this "
                  "process allocates) peaked at ", non_model / MB, " MB, more than steady_cuda_cap_ratio ",
                  steady_ratio_, " x the memory cap ", double(stats_.cap) / MB, " MB (memory_cap_mb or "
                  "BOOSTER_MEMORY_CAP_MB): it does not fit even with every chunk on disk; raise the cap or lower the "
                  "batch size");
  // Warm-up steps keep at most the warm-up placement (less when the measured figure leaves less).
  const double warmup_budget = double(stats_.cap) * (1.0 - warmup_ratio_);
  place(stats_.steps > kWarmupSteps ? std::max(budget, 0.0) : std::clamp(budget, 0.0, warmup_budget));
  host_tier().reset_peak();
}

}  // namespace booster::plugins
