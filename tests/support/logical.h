// The logical tensor behind a tensor-parallel shard, for tests that compare models trained
// at different layouts: every rank's box of it is all-gathered (collective over the world:
// every rank calls it for the same parameters in the same order) and assembled.
#pragma once

#include <cstring>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/tensor.h"

namespace booster::testkit {

/// `t` itself when whole; otherwise the whole logical tensor (f32) from every rank's box.
inline Tensor logical(const Tensor& t) {
  if (!t.region()) return t.to(DType::f32);
  NoGradGuard ng;
  const Region& r = *t.region();
  BOOSTER_CHECK(r.is_box(), "logical(): a flat range ", r.str(), " is not a tensor-parallel box");
  std::string mine;
  auto put = [&](const void* p, size_t n) { mine.append(static_cast<const char*>(p), n); };
  put(r.offset.data(), r.offset.size() * sizeof(int64_t));
  Tensor data = t.detach().to(DType::f32).contiguous();
  put(data.data<float>(), size_t(data.numel()) * sizeof(float));
  Tensor full = Tensor::zeros(r.full);
  for (const std::string& piece : dist::all_gather_bytes(mine)) {
    std::vector<int64_t> off(r.full.size());
    std::memcpy(off.data(), piece.data(), off.size() * sizeof(int64_t));
    Tensor src = Tensor::empty(r.extent);
    std::memcpy(src.data<float>(), piece.data() + off.size() * sizeof(int64_t), size_t(src.numel()) * sizeof(float));
    Tensor dst = full;
    for (size_t d = 0; d < off.size(); ++d) dst = dst.narrow(int64_t(d), off[d], r.extent[d]);
    dst.copy_(src);
  }
  return full;
}

}  // namespace booster::testkit
