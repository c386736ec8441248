// The logical tensor behind a tensor-parallel shard or a pipeline stage's parameter, for
// tests that compare models trained at different layouts: every rank's box of it (none on
// a stage that does not hold it) is all-gathered and assembled. Collective over the world:
// every rank calls it for the same parameters in the same order.
#pragma once

#include <cstring>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/tensor.h"
#include "nn/module.h"

namespace booster::testkit {

/// The whole logical tensor (f32) assembled from every rank's `t` (undefined: this rank
/// holds none of it).
inline Tensor logical(const Tensor& t) {
  NoGradGuard ng;
  std::string mine;
  auto put = [&](const void* p, size_t n) { mine.append(static_cast<const char*>(p), n); };
  if (t.defined()) {
    const Region r = t.region() ? *t.region() : Region::whole(t.shape());
    BOOSTER_CHECK(r.is_box(), "logical(): a flat range ", r.str(), " is not a tensor-parallel box");
    const int64_t nd = int64_t(r.full.size());
    put(&nd, sizeof nd);
    put(r.full.data(), r.full.size() * sizeof(int64_t));
    put(r.offset.data(), r.offset.size() * sizeof(int64_t));
    put(r.extent.data(), r.extent.size() * sizeof(int64_t));
    Tensor data = t.detach().to(DType::f32).contiguous();
    put(data.data<float>(), size_t(data.numel()) * sizeof(float));
  }
  Tensor full;
  for (const std::string& piece : dist::all_gather_bytes(mine)) {
    if (piece.empty()) continue;
    const char* p = piece.data();
    int64_t nd = 0;
    std::memcpy(&nd, p, sizeof nd);
    Shape shape(static_cast<size_t>(nd)), off(shape), extent(shape);
    std::memcpy(shape.data(), p + 8, size_t(nd) * 8);
    std::memcpy(off.data(), p + 8 + nd * 8, size_t(nd) * 8);
    std::memcpy(extent.data(), p + 8 + 2 * nd * 8, size_t(nd) * 8);
    if (!full.defined()) full = Tensor::zeros(shape);
    const size_t head = size_t(8 + 24 * nd), n = (piece.size() - head) / sizeof(float);
    Tensor src = Tensor::empty(extent);
    std::memcpy(src.data<float>(), p + head, n * sizeof(float));
    Tensor dst = full;
    for (size_t d = 0; d < size_t(nd); ++d) dst = dst.narrow(int64_t(d), off[d], extent[d]);
    dst.copy_(src);
  }
  BOOSTER_CHECK(full.defined(), "logical(): no rank holds the tensor");
  return full;
}

/// The logical tensor of parameter `name` of `m` (a pipeline stage may not hold it).
inline Tensor logical_param(const nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return logical(p);
  return logical(Tensor());
}

}  // namespace booster::testkit
