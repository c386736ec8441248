// The ZeRO partition layout (Colossal-AI's low-level ZeRO layout): which rank holds which
// flat range of which parameter, and how the parameters are grouped in buckets. Each
// trainable floating parameter is flattened and split into dp chunks of ceil(numel / dp)
// elements, the last padded; rank r owns chunk r. Buckets group parts for one collective
// each, in the order backward finishes them (reduce-scatter) or the forward uses them
// (Gemini's chunks, packed again after the first step). Pure bookkeeping: no tensors are
// made or moved here.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/dist/process_group.h"
#include "core/tensor/region.h"
#include "optim/optimizer.h"

namespace booster::zero {

/// One trainable parameter and what this rank owns of it.
struct Part {
  std::string name;
  Tensor param;          // the working parameter (full, working dtype; [0] while released)
  Shape shape;           // the parameter's shape (param is [0] while released)
  int64_t numel, chunk;  // elements, and elements per rank (ceil(numel / dp))
  int64_t lo, n;         // this rank's elements [lo, lo + n) of the flattened parameter
  Region region;         // the same, as a region of the logical tensor
  const dist::ProcessGroup* group = nullptr;  // the data-parallel group it is reduced over
  bool replicated = false;  // whole on every rank of its group (DDP): all-reduced, never split
  /// Rank r's elements [first, first + second) of the flattened parameter.
  std::pair<int64_t, int64_t> range_of(int r) const;
};

/// Where one parameter is reduced, and whether it is split there (ZeRO) or kept whole (DDP).
struct PartPlacement {
  const dist::ProcessGroup* group = nullptr;
  bool replicated = false;
};
/// A parameter's placement by name (Galvatron: each layer its own data-parallel group and kind).
using PartPlacer = std::function<PartPlacement(const std::string& name)>;

class Layout {
 public:
  /// The trainable floating parameters of `params` over `dp`, in buckets of about
  /// bucket_elems elements, last parameters first (the order backward finishes them). A
  /// placer puts parameters on other groups (or keeps them whole); a bucket never mixes them.
  Layout(const optim::NamedParams& params, const dist::ProcessGroup& dp, double bucket_elems, PartPlacer placer = {});

  /// The group of every part when uniform(); the engine's nominal group otherwise.
  const dist::ProcessGroup& group() const { return dp_; }
  /// Every part split over group(): plain ZeRO (no placer).
  bool uniform() const { return uniform_; }
  /// The group of a bucket's parts (one group a bucket).
  const dist::ProcessGroup& group_of(const std::vector<size_t>& bucket) const { return *parts_.at(bucket.front()).group; }
  std::vector<Part>& parts() { return parts_; }
  const std::vector<Part>& parts() const { return parts_; }
  size_t size() const { return parts_.size(); }
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  /// The bucket holding part i.
  size_t bucket_of(size_t i) const { return bucket_of_.at(i); }
  /// Elements of one rank's share of a bucket of these parts (their chunks side by side).
  int64_t width(const std::vector<size_t>& bucket) const;
  /// Buckets of about bucket_elems elements packed from the parts in `order` (every part
  /// once), the first capped at 2^18 elements.
  std::vector<std::vector<size_t>> pack_buckets(const std::vector<size_t>& order, double bucket_elems) const;
  /// Regroups the parts (every part in exactly one bucket, else an error).
  void set_buckets(std::vector<std::vector<size_t>> buckets);

 private:
  const dist::ProcessGroup& dp_;
  bool uniform_;
  std::vector<Part> parts_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<size_t> bucket_of_;
};

}  // namespace booster::zero
