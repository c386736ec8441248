// Tensor-parallel linears (see linear_1d.h).
#include "nn/parallel/linear_1d.h"

#include "core/autograd/grad_mode.h"
#include "core/dist/functional.h"
#include "core/tensor/lazy.h"

namespace booster::nn {

void shard_parameter_blocks(Tensor p, const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>>& blocks,
                            const std::string& who) {
  if (!p.defined()) return;
  BOOSTER_CHECK(!p.region(), who, ": the parameter ", shape_str(p.shape()), " is already a shard (",
                p.region()->str(), ")");
  const Shape full = p.shape();
  Shape offset(full.size(), 0), extent = full;
  for (auto& [dim, bl] : blocks) {
    const auto [block, n] = bl;
    const int64_t size = full[size_t(dim)];
    BOOSTER_CHECK_T(ShapeError, size % n == 0, who, ": dim ", dim, " of the parameter ", shape_str(full),
                    " does not divide into ", n, " blocks");
    extent[size_t(dim)] = size / n;
    offset[size_t(dim)] = block * (size / n);
  }
  const Region box = Region::box(full, offset, extent);
  if (is_lazy(p)) return lazy_restrict(p, box);  // materialized as the block alone
  NoGradGuard ng;
  Tensor t = p.detach();
  for (auto& [dim, bl] : blocks) t = t.narrow(dim, offset[size_t(dim)], extent[size_t(dim)]);
  p.set_data(t.contiguous().clone());
  p.set_region(box);
}

void shard_parameter(Tensor p, int64_t dim, const dist::ProcessGroup& g, const std::string& who) {
  if (!p.defined()) return;
  BOOSTER_CHECK_T(ShapeError, p.size(dim) % g.size() == 0, who, ": dim ", dim, " of the parameter ",
                  shape_str(p.shape()), " does not divide by the tensor-parallel size ", g.size());
  shard_parameter_blocks(p, {{dim, {g.rank(), g.size()}}}, who);
}

std::pair<Tensor, Tensor> linear_handles(const std::shared_ptr<Module>& native, const std::string& who) {
  auto* lin = dynamic_cast<Linear*>(native.get());
  BOOSTER_CHECK(lin != nullptr, who, ".from_native_module: expects a Linear, got a ",
                native ? native->type_name() : "null module");
  return {lin->weight.get(), lin->bias.defined() ? lin->bias.get() : Tensor()};
}

std::shared_ptr<Linear> Linear1DCol::from_native_module(const std::shared_ptr<Module>& native,
                                                        const dist::ProcessGroup& tp, Linear1DOptions opts) {
  if (auto done = std::dynamic_pointer_cast<Linear1DCol>(native)) return done;
  auto [w, b] = linear_handles(native, "Linear1D_Col");
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
  auto [w, b] = linear_handles(native, "Linear1D_Row");
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
