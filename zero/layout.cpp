// The ZeRO partition layout (see layout.h).
#include "zero/layout.h"

#include <algorithm>

namespace booster::zero {

std::pair<int64_t, int64_t> Part::range_of(int r) const {
  if (replicated) return {0, numel};
  const int64_t first = std::min(numel, chunk * r);
  return {first, std::min(numel, first + chunk) - first};
}

Layout::Layout(const optim::NamedParams& params, const dist::ProcessGroup& dp, double bucket_elems, PartPlacer placer)
    : dp_(dp), uniform_(!placer) {
  for (auto& [name, p] : params) {
    if (!p.requires_grad() || !is_floating(p.dtype())) continue;
    Part part;
    part.name = name;
    part.param = p;
    part.shape = p.shape();
    part.numel = p.numel();
    const PartPlacement where = placer ? placer(name) : PartPlacement{&dp, false};
    BOOSTER_CHECK(where.group != nullptr, "ZeRO layout: no data-parallel group for '", name, "'");
    part.group = where.group;
    part.replicated = where.replicated;
    const int n = part.replicated ? 1 : part.group->size(), r = part.replicated ? 0 : part.group->rank();
    part.chunk = (part.numel + n - 1) / n;
    std::tie(part.lo, part.n) = part.range_of(r);
    const Region whole = p.region() ? *p.region() : Region::whole(p.shape());
    part.region = whole.sub_range(part.lo, part.n);
    parts_.push_back(std::move(part));
  }
  std::vector<size_t> backward(parts_.size());
  for (size_t k = 0; k < backward.size(); ++k) backward[k] = backward.size() - 1 - k;
  set_buckets(pack_buckets(backward, bucket_elems));
}

int64_t Layout::width(const std::vector<size_t>& bucket) const {
  int64_t w = 0;
  for (size_t i : bucket) w += parts_.at(i).chunk;
  return w;
}

std::vector<std::vector<size_t>> Layout::pack_buckets(const std::vector<size_t>& order, double bucket_elems) const {
  // The first is capped at 2^18 elements (PyTorch's DDP caps it at 1 MB) so communication
  // starts early and overlaps the rest of backward even when the model is one default bucket.
  BOOSTER_CHECK(order.size() == parts_.size(), "ZeRO layout: ", order.size(), " parts ordered, the partition has ",
                parts_.size());
  std::vector<std::vector<size_t>> buckets;
  double in_bucket = 0;
  for (size_t k : order) {
    const double cap = buckets.size() <= 1 ? std::min(bucket_elems, double(1 << 18)) : bucket_elems;
    const bool other_kind = !buckets.empty() && (parts_.at(k).group != parts_.at(buckets.back().front()).group ||
                                                 parts_[k].replicated != parts_[buckets.back().front()].replicated);
    if (buckets.empty() || other_kind || (in_bucket > 0 && in_bucket + double(parts_.at(k).numel) > cap)) {
      buckets.emplace_back();
      in_bucket = 0;
    }
    buckets.back().push_back(k);
    in_bucket += double(parts_[k].numel);
  }
  return buckets;
}

void Layout::set_buckets(std::vector<std::vector<size_t>> buckets) {
  std::vector<int> seen(parts_.size(), 0);
  for (auto& b : buckets)
    for (size_t i : b) {
      ++seen.at(i);
      BOOSTER_CHECK(parts_[i].group == parts_[b.front()].group && parts_[i].replicated == parts_[b.front()].replicated,
                    "ZeRO layout: a bucket mixes parts of different groups or kinds ('", parts_[i].name, "' and '",
                    parts_[b.front()].name, "')");
    }
  BOOSTER_CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }),
                "ZeRO layout: every part must be in exactly one bucket");
  buckets_ = std::move(buckets);
  bucket_of_.assign(parts_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of_[i] = b;
}

}  // namespace booster::zero
