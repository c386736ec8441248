// Tensor-parallel linears (see linear_1d.h).
#include "nn/parallel/linear_1d.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/functional.h"
#include "core/tensor/lazy.h"

namespace booster::nn {

void shard_parameter(Tensor p, int64_t dim, const dist::ProcessGroup& g, const std::string& who) {
  if (!p.defined()) return;
  BOOSTER_CHECK(!p.region(), who, ": the parameter ", shape_str(p.shape()), " is already a shard (",
                p.region()->str(), ")");
  const int64_t n = g.size(), size = p.size(dim);
  BOOSTER_CHECK_T(ShapeError, size % n == 0, who, ": dim ", dim, " of the parameter ", shape_str(p.shape()),
                  " does not divide by the tensor-parallel size ", n);
  const int64_t c = size / n;
  const Shape full = p.shape();
  Shape offset(full.size(), 0), extent = full;
  offset[size_t(dim)] = g.rank() * c;
  extent[size_t(dim)] = c;
  const Region box = Region::box(full, offset, extent);
  if (is_lazy(p)) return lazy_restrict(p, box);  // materialized as the slice alone
  NoGradGuard ng;
  p.set_data(p.detach().narrow(dim, offset[size_t(dim)], c).contiguous().clone());
  p.set_region(box);
}

namespace {
// The native Linear's handles, checked: a plain Linear (not already a parallel one).
std::pair<Tensor, Tensor> native_handles(const std::shared_ptr<Module>& native, const char* who) {
  auto* lin = dynamic_cast<Linear*>(native.get());
  BOOSTER_CHECK(lin != nullptr, who, ".from_native_module: expects a Linear, got a ",
                native ? native->type_name() : "null module");
  return {lin->weight.get(), lin->bias.defined() ? lin->bias.get() : Tensor()};
}
}  // namespace

std::shared_ptr<Linear> Linear1DCol::from_native_module(const std::shared_ptr<Module>& native,
                                                        const dist::ProcessGroup& tp, Linear1DOptions opts) {
  if (auto done = std::dynamic_pointer_cast<Linear1DCol>(native)) return done;
  auto [w, b] = native_handles(native, "Linear1D_Col");
  shard_parameter(w, 0, tp, "Linear1D_Col weight");
  shard_parameter(b, 0, tp, "Linear1D_Col bias");
  return std::make_shared<Linear1DCol>(w, b, tp, opts);
}

// x: [..., in] (a sequence shard [B, T/tp, in] under sequence parallelism) -> [..., out/tp]
Tensor Linear1DCol::forward(const Tensor& x) {
  Tensor in = opts_.input_gathered ? x
               : opts_.seq_parallel ? dist::gather_forward_reducescatter_backward(x, opts_.seq_dim, tp_, opts_.seq_len)
                                    : dist::reduce_backward(x, tp_);
  Tensor y = linear(in, weight, bias.defined() ? bias.get() : Tensor());
  return opts_.gather_output ? dist::gather_forward_split_backward(y, -1, tp_) : y;
}

std::shared_ptr<Linear> Linear1DRow::from_native_module(const std::shared_ptr<Module>& native,
                                                        const dist::ProcessGroup& tp, Linear1DOptions opts) {
  if (auto done = std::dynamic_pointer_cast<Linear1DRow>(native)) return done;
  auto [w, b] = native_handles(native, "Linear1D_Row");
  shard_parameter(w, 1, tp, "Linear1D_Row weight");
  return std::make_shared<Linear1DRow>(w, b, tp, opts);
}

// x: [..., in/tp] -> [..., out] (a balanced sequence shard of it under sequence parallelism)
Tensor Linear1DRow::forward(const Tensor& x) {
  Tensor in = opts_.parallel_input ? x : dist::split_forward_gather_backward(x, -1, tp_);
  Tensor partial = linear(in, weight, Tensor());
  Tensor y = opts_.seq_parallel ? dist::reducescatter_forward_gather_backward(partial, opts_.seq_dim, tp_, true)
                                : dist::reduce_forward(partial, tp_);
  if (!bias.defined()) return y;
  // Under sequence parallelism each rank adds the bias to its own tokens: its gradient is
  // a partial sum, completed over tp in backward.
  Tensor b = opts_.seq_parallel ? dist::reduce_backward(bias.get(), tp_) : bias.get();
  return add(y, b.to(y.dtype()));
}

}  // namespace booster::nn
