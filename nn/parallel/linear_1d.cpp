// Tensor-parallel linears (see linear_1d.h).
#include "nn/parallel/linear_1d.h"

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/functional.h"
#include "core/kernels/ops.h"
#include "core/tensor/lazy.h"
#include "nn/parallel/ring_linear.h"

namespace booster::nn {

void shard_parameter_region(Tensor p, const Region& box, const std::string& who) {
  if (!p.defined()) return;
  BOOSTER_CHECK(!p.region(), who, ": the parameter ", shape_str(p.shape()), " is already a shard (", p.region()->str(), ")");
  BOOSTER_CHECK_T(ShapeError, box.full == p.shape() && box.is_box(), who, ": ", box.str(), " is not a box of the parameter ",
                  shape_str(p.shape()));
  if (is_lazy(p)) return lazy_restrict(p, box);  // materialized as the block alone
  NoGradGuard ng;
  Tensor t = p.detach().reshape(box.coords());
  for (size_t d = 0; d < box.coords().size(); ++d) t = t.narrow(int64_t(d), box.offset[d], box.extent[d]);
  p.set_data(t.contiguous().reshape(box.local_shape()).clone());
  p.set_region(box);
}

void shard_parameter_blocks(Tensor p, const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>>& blocks,
                            const std::string& who) {
  if (!p.defined()) return;
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
  shard_parameter_region(p, Region::box(full, offset, extent), who);
}

void shard_parameter(Tensor p, int64_t dim, const dist::ProcessGroup& g, const std::string& who) {
  if (!p.defined()) return;
  BOOSTER_CHECK_T(ShapeError, p.size(dim) % g.size() == 0, who, ": dim ", dim, " of the parameter ",
                  shape_str(p.shape()), " does not divide by the tensor-parallel size ", g.size());
  shard_parameter_blocks(p, {{dim, {g.rank(), g.size()}}}, who);
}

Tensor sequence_gathered_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroup& tp,
                                int64_t seq_dim, bool in_out) {
  const dist::ProcessGroup* g = &tp;
  const int64_t in = in_out ? weight.size(0) : weight.size(1), out = in_out ? weight.size(1) : weight.size(0);
  BOOSTER_CHECK_T(ShapeError, x.size(-1) == in, "sequence-parallel linear: input ", shape_str(x.shape()), " does not end in ",
                  in, " features");
  Tensor y;
  {
    NoGradGuard ng;
    const Tensor full = dist::all_gather_along(x.detach(), seq_dim, tp);
    Shape os = full.shape();
    os.back() = out;
    const Tensor w = weight.detach();
    y = matmul(full.reshape({-1, in}), in_out ? w : w.transpose(0, 1)).view(os);
    if (bias.defined()) y = add(y, bias.detach().to(y.dtype()));
  }
  Tensor xs = x.detach(), ws = weight.detach();
  const bool has_bias = bias.defined();
  const DType bias_dtype = has_bias ? bias.dtype() : DType::f32;
  std::vector<Tensor> inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  return autograd::record("SequenceGatheredLinear", inputs, y,
                          [xs, ws, g, seq_dim, in, out, in_out, has_bias, bias_dtype](const std::vector<Tensor>& gr) {
                            NoGradGuard ng;
                            const Tensor full = dist::all_gather_along(xs, seq_dim, *g).reshape({-1, in});
                            const Tensor dy = gr[0].contiguous().reshape({-1, out}).to(full.dtype());
                            Tensor dw = in_out ? matmul(full.transpose(0, 1), dy) : matmul(dy.transpose(0, 1), full);
                            Tensor dfull = matmul(dy, in_out ? ws.transpose(0, 1) : ws);  // [n, in]
                            Shape fs = xs.shape();
                            fs[size_t(seq_dim)] *= g->size();
                            Tensor dx = dist::reduce_scatter_along(dfull.view(fs), seq_dim, *g);
                            std::vector<Tensor> grads{dx.to(xs.dtype()), dw.to(ws.dtype())};
                            if (has_bias) grads.push_back(sum(dy, {0}).to(bias_dtype));
                            return grads;
                          });
}

std::pair<Tensor, Tensor> linear_handles(const std::shared_ptr<Module>& native, const std::string& who) {
  auto& lin = native_as<Linear>(native, who, "a Linear");
  return {lin.weight.get(), lin.bias.defined() ? lin.bias.get() : Tensor()};
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
  Tensor y;
  if (!opts_.input_gathered && opts_.tokens_split() && opts_.seq_len < 0) {  // even shards: Megatron's gather, kept as the shard
    const Tensor b = bias.defined() ? bias.get() : Tensor();
    y = opts_.ring ? ring_gathered_linear(x, weight, b, tp_, false) : sequence_gathered_linear(x, weight, b, tp_, opts_.seq_dim, false);
  } else {
    Tensor in = opts_.input_gathered ? x
                 : opts_.tokens_split() ? dist::gather_forward_reducescatter_backward(x, opts_.seq_dim, tp_, opts_.seq_len)
                                        : dist::reduce_backward(x, tp_);
    y = linear(in, weight, bias.defined() ? bias.get() : Tensor());
  }
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
  Tensor y = opts_.tokens_split() && opts_.ring ? ring_scattered_linear(in, weight, tp_, false)
             : opts_.tokens_split() ? dist::reducescatter_forward_gather_backward(linear(in, weight, Tensor()), opts_.seq_dim, tp_, true)
                                    : dist::reduce_forward(linear(in, weight, Tensor()), tp_);
  if (!bias.defined()) return y;
  // Under sequence parallelism each rank adds the bias to its own tokens: its gradient is
  // a partial sum, completed over tp in backward.
  Tensor b = opts_.tokens_split() ? dist::reduce_backward(bias.get(), tp_) : bias.get();
  return add(y, b.to(y.dtype()));
}

}  // namespace booster::nn
