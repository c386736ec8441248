// The logical tensor behind a shard, for tests that compare models trained at different
// layouts: a tensor-parallel box, a ZeRO or Gemini flat range, a pipeline stage's whole
// parameter (none on the other stages). Every rank's piece is all-gathered and assembled
// along the row-major runs of its region. Collective over the world: every rank calls it
// for the same names in the same order.
#pragma once

#include <cstring>

#include "booster/model_wrapper.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/tensor.h"
#include "nn/module.h"

namespace booster::testkit {

/// The whole logical tensor (f32) from every rank's (t, region); t undefined: this rank
/// holds none of it.
inline Tensor logical(const Tensor& t, const Region& region) {
  NoGradGuard ng;
  std::string mine;
  auto put = [&](const void* p, size_t n) { mine.append(static_cast<const char*>(p), n); };
  auto put_shape = [&](const Shape& s) { put(s.data(), s.size() * sizeof(int64_t)); };
  if (t.defined()) {
    const int64_t nd = int64_t(region.full.size()), nc = int64_t(region.coords().size());
    put(&nd, sizeof nd);
    put(&nc, sizeof nc);
    put_shape(region.full), put_shape(region.coords()), put_shape(region.offset), put_shape(region.extent);
    put(&region.range_start, sizeof(int64_t));
    put(&region.range_numel, sizeof(int64_t));
    Tensor data = t.detach().to(DType::f32).contiguous();
    BOOSTER_CHECK(data.numel() == region.numel(), "logical(): ", data.numel(), " elements for ", region.str());
    put(data.data<float>(), size_t(data.numel()) * sizeof(float));
  }
  Tensor full;
  for (const std::string& piece : dist::all_gather_bytes(mine)) {
    if (piece.empty()) continue;
    const char* p = piece.data();
    auto take = [&](void* dst, size_t n) {
      std::memcpy(dst, p, n);
      p += n;
    };
    int64_t nd = 0, nc = 0;
    take(&nd, sizeof nd);
    take(&nc, sizeof nc);
    Region r;
    for (Shape* s : {&r.full, &r.frame, &r.offset, &r.extent}) {
      s->resize(size_t(s == &r.full ? nd : nc));
      take(s->data(), s->size() * sizeof(int64_t));
    }
    if (r.frame == r.full) r.frame.clear();
    take(&r.range_start, sizeof(int64_t));
    take(&r.range_numel, sizeof(int64_t));
    if (!full.defined()) full = Tensor::zeros(r.full);
    const float* src = reinterpret_cast<const float*>(p);
    float* dst = full.data<float>();
    for (const Run& run : r.runs()) std::memcpy(dst + run.start, src + run.local, size_t(run.length) * sizeof(float));
  }
  BOOSTER_CHECK(full.defined(), "logical(): no rank holds the tensor");
  return full;
}

/// `t` with its own region (whole unless a layer sharded it).
inline Tensor logical(const Tensor& t) {
  if (!t.defined()) return logical(t, Region{});
  return logical(t, t.region() ? *t.region() : Region::whole(t.shape()));
}

/// The logical tensor of parameter `name` of `m` (a pipeline stage may not hold it).
inline Tensor logical_param(const nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return logical(p);
  return logical(Tensor());
}

/// The logical tensor `name` of what a boosted model holds for checkpoints (ZeRO and Gemini
/// ranks: their fp32 master ranges).
inline Tensor logical_state(const ShardedState& state, const std::string& name) {
  for (auto& st : state)
    if (st.name == name) return logical(HeldState(st).data(), st.region);
  return logical(Tensor(), Region{});
}

}  // namespace booster::testkit
