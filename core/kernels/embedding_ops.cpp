// Embedding lookup (torch.nn.functional.embedding): rows of a weight table picked by integer
// ids, forward a row copy in the table's dtype, backward the f32 sums of the rows each id's
// positions received, handed to the engine as rows of the table's gradient (added where its
// gradients meet, rounded once to its dtype: no dense [V, D] pass of the embedding's own). An id
// outside the table is an error naming its position and value. The reference (the test
// oracle) is the one-hot product: onehot(ids) [N, V] x weight, its gradient onehot^T x g.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"

namespace booster {

// weight: [V, D], ids: [...] i64 or i32 -> [..., D]
Tensor embedding(const Tensor& weight, const Tensor& ids) {
  ProfileScope prof("embedding");
  BOOSTER_CHECK_T(ShapeError, weight.dim() == 2, "embedding: the weight must be [num_embeddings, embedding_dim], got ",
                  shape_str(weight.shape()));
  const int64_t v = weight.size(0), d = weight.size(1), n = ids.numel();
  const Tensor idc = as_indices(ids, "embedding: ids"), w = weight.detach().contiguous();
  const int64_t* id = idc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    BOOSTER_CHECK_T(ValueError, id[i] >= 0 && id[i] < v, "embedding: id ", id[i], " at position ", i, " of ids ",
                    shape_str(ids.shape()), " is outside the table of ", v, " rows");
  Shape os = ids.shape();
  os.push_back(d);
  if (kernels::use_reference()) {  // the one-hot product, through matmul (and its backward)
    Tensor onehot = Tensor::zeros({n, v}, weight.dtype());
    for (int64_t i = 0; i < n; ++i) onehot.select(0, i).narrow(0, id[i], 1).fill_(1.0);
    return matmul(onehot, weight).view(os);
  }
  Tensor out = Tensor::empty(os, weight.dtype());
  const size_t row = size_t(d) * dtype_size(weight.dtype());
  const char* src = static_cast<const char*>(w.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
#pragma omp parallel for schedule(static) if (n * d > 65536)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + size_t(i) * row, src + size_t(id[i]) * row, row);
  return autograd::record("embedding", {weight}, out, [idc, v, d, n](const std::vector<Tensor>& g) {
    const Tensor go = g[0].to(DType::f32).contiguous();
    const int64_t* id = idc.data<int64_t>();
    // The ids hit, in the order first seen, and the positions of each (ascending).
    std::vector<int64_t> slot(size_t(v), -1), hit, start;
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      if (slot[size_t(id[i])] < 0) slot[size_t(id[i])] = int64_t(hit.size()), hit.push_back(id[i]);
    const auto u = int64_t(hit.size());
    start.assign(size_t(u + 1), 0);
    for (int64_t i = 0; i < n; ++i) ++start[size_t(slot[size_t(id[i])] + 1)];
    for (int64_t k = 0; k < u; ++k) start[size_t(k + 1)] += start[size_t(k)];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) pos[size_t(fill[size_t(slot[size_t(id[i])])]++)] = i;
    // Each hit row's sum in position order: a repeated id's gradients sum in the order
    // PyTorch's CPU kernel does. The table's gradient is these rows (the engine adds them
    // where the table's gradients meet: into a tied head's, or onto zeros).
    Tensor rows = Tensor::empty({u, d});
    const float* gp = go.data<float>();
    float* rp = rows.data<float>();
#pragma omp parallel for schedule(static) if (n * d > 65536)
    for (int64_t k = 0; k < u; ++k) {
      float* r = rp + k * d;
      std::fill(r, r + d, 0.f);
      for (int64_t q = start[size_t(k)]; q < start[size_t(k + 1)]; ++q) {
        const float* s = gp + pos[size_t(q)] * d;
        for (int64_t j = 0; j < d; ++j) r[j] += s[j];
      }
    }
    autograd::add_rows_to_gradient(0, Tensor::from_ints(hit, {u}), rows);
    return std::vector<Tensor>{Tensor()};
  });
}

namespace kernels {

void add_rows_(Tensor& dst, const Tensor& indices, const Tensor& rows) {
  BOOSTER_CHECK_T(ShapeError, dst.dim() == 2 && rows.dim() == 2 && rows.size(1) == dst.size(1) &&
                                  indices.numel() == rows.size(0) && dst.is_contiguous() && rows.dtype() == DType::f32,
                  "add_rows_: rows ", shape_str(rows.shape()), " (f32) into ", shape_str(dst.shape()), " (contiguous)");
  const int64_t u = rows.size(0), d = rows.size(1), v = dst.size(0);
  const Tensor ic = indices.contiguous();
  const int64_t* id = ic.data<int64_t>();
  for (int64_t k = 0; k < u; ++k) BOOSTER_CHECK(id[k] >= 0 && id[k] < v, "add_rows_: row ", id[k], " of ", v);
  const float* rp = rows.data<float>();
  const DType t = dst.dtype();
  char* base = static_cast<char*>(dst.raw_data());
  const size_t es = dtype_size(t);
#pragma omp parallel for schedule(static) if (u * d > 65536)
  for (int64_t k = 0; k < u; ++k) {
    const float* r = rp + k * d;
    if (t == DType::f32) {
      float* o = reinterpret_cast<float*>(base) + id[k] * d;
      for (int64_t j = 0; j < d; ++j) o[j] += r[j];
    } else {  // widened, summed and rounded once
      std::vector<float> row(static_cast<size_t>(d));
      void* o = base + size_t(id[k] * d) * es;
      convert_serial(o, t, row.data(), DType::f32, d);
      for (int64_t j = 0; j < d; ++j) row[size_t(j)] += r[j];
      convert_serial(row.data(), DType::f32, o, t, d);
    }
  }
}

}  // namespace kernels

}  // namespace booster
