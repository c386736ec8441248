// Embedding lookup (torch.nn.functional.embedding): rows of a weight table picked by integer
// ids, forward a row copy in the table's dtype, backward a scatter-add of the output's
// gradient into a dense gradient of the table (f32 sums, rounded once to its dtype). An id
// outside the table is an error naming its position and value. The reference (the test
// oracle) is the one-hot product: onehot(ids) [N, V] x weight, its gradient onehot^T x g.
#include <cstring>

#include "core/autograd/engine.h"
#include "core/common/profiler.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/ops.h"

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
  const DType dt = weight.dtype();
  return autograd::record("embedding", {weight}, out, [idc, v, d, n, dt](const std::vector<Tensor>& g) {
    const Tensor go = g[0].to(DType::f32).contiguous();
    Tensor gw = Tensor::zeros({v, d});
    const int64_t* id = idc.data<int64_t>();
    const float* gp = go.data<float>();
    float* wp = gw.data<float>();
    // Rows in id order: a repeated id's gradients sum in the order PyTorch's CPU kernel does.
    for (int64_t i = 0; i < n; ++i) {
      float* r = wp + id[i] * d;
      const float* s = gp + i * d;
      for (int64_t j = 0; j < d; ++j) r[j] += s[j];
    }
    return std::vector<Tensor>{dt == DType::f32 ? gw : gw.to(dt)};
  });
}

}  // namespace booster
