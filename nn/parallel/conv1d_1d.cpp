// GPT-2's tensor-parallel Conv1D projections (see conv1d_1d.h).
#include "nn/parallel/conv1d_1d.h"

#include "core/dist/functional.h"
#include "nn/parallel/linear_1d.h"
#include "nn/parallel/ring_linear.h"

namespace booster::nn {

namespace {
std::pair<Tensor, Tensor> conv1d_handles(const std::shared_ptr<Module>& native, const char* who) {
  auto& c = native_as<Conv1D>(native, who, "a Conv1D");
  return {c.weight.get(), c.bias.defined() ? c.bias.get() : Tensor()};
}
// A fresh copy of a Conv1D subclass of `w`'s and `b`'s shapes (released tensors stay released).
template <typename T, typename... Args>
std::shared_ptr<Module> fresh_conv(const TensorSlot& w, const TensorSlot& b, Args&&... args) {
  if (!w.defined()) {
    auto m = std::make_shared<T>(Tensor::empty({1, 1}), Tensor(), std::forward<Args>(args)...);
    m->replace_tensor("weight", Tensor());
    return m;
  }
  return std::make_shared<T>(Tensor::empty(w->shape(), w->dtype()),
                             b.defined() ? Tensor::empty(b->shape(), b->dtype()) : Tensor(), std::forward<Args>(args)...);
}
}  // namespace

std::shared_ptr<UnaryModule> GPT2FusedLinearConv1DCol::from_native_module(const std::shared_ptr<Module>& native,
                                                                         const dist::ProcessGroup& tp, int64_t n,
                                                                         Linear1DOptions opts) {
  if (auto done = std::dynamic_pointer_cast<GPT2FusedLinearConv1DCol>(native)) return done;
  auto [w, b] = conv1d_handles(native, "GPT2FusedLinearConv1D_Col");
  const int64_t in = w.size(0), out = w.size(1), t = tp.size(), r = tp.rank();
  BOOSTER_CHECK_T(ShapeError, out % (n * t) == 0, "GPT2FusedLinearConv1D_Col: ", out, " output features in ", n,
                  " fused parts do not divide by the tensor-parallel size ", t);
  const int64_t part = out / n, mine = part / t;
  shard_parameter_region(w, Region::framed_box(w.shape(), {in, n, part}, {0, 0, r * mine}, {in, n, mine}),
                         "GPT2FusedLinearConv1D_Col weight");
  if (b.defined())
    shard_parameter_region(b, Region::framed_box(b.shape(), {n, part}, {0, r * mine}, {n, mine}),
                           "GPT2FusedLinearConv1D_Col bias");
  return std::make_shared<GPT2FusedLinearConv1DCol>(w, b, tp, n, std::move(opts));
}

// x: [..., in] (a sequence shard [B, T/tp, in] under sequence parallelism) -> [..., out/tp]
Tensor GPT2FusedLinearConv1DCol::forward(const Tensor& x) {
  if (opts_.tokens_split()) {  // Megatron's gather, the input kept as the shard for backward
    const Tensor b = bias.defined() ? bias.get() : Tensor();
    return opts_.ring ? ring_gathered_linear(x, weight, b, tp_, true) : sequence_gathered_linear(x, weight, b, tp_, opts_.seq_dim, true);
  }
  return Conv1D::forward(dist::reduce_backward(x, tp_));
}

std::shared_ptr<Module> GPT2FusedLinearConv1DCol::fresh() const {
  return fresh_conv<GPT2FusedLinearConv1DCol>(weight, bias, tp_, n_fused_, opts_);
}

std::shared_ptr<UnaryModule> GPT2FusedLinearConv1DRow::from_native_module(const std::shared_ptr<Module>& native,
                                                                         const dist::ProcessGroup& tp, Linear1DOptions opts) {
  if (auto done = std::dynamic_pointer_cast<GPT2FusedLinearConv1DRow>(native)) return done;
  auto [w, b] = conv1d_handles(native, "GPT2FusedLinearConv1D_Row");
  shard_parameter(w, 0, tp, "GPT2FusedLinearConv1D_Row weight");
  return std::make_shared<GPT2FusedLinearConv1DRow>(w, b, tp, std::move(opts));
}

// x: [..., in/tp] -> [..., out]
Tensor GPT2FusedLinearConv1DRow::forward(const Tensor& x) {
  const int64_t in = weight->size(0), out = weight->size(1);
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == in, "GPT2FusedLinearConv1D_Row: input ", shape_str(x.shape()),
                  " does not end in this rank's ", in, " features");
  const bool split = opts_.tokens_split();
  Tensor y;
  if (split && opts_.ring) {
    y = ring_scattered_linear(x, weight, tp_, true);
  } else {
    Shape os = x.shape();
    os.back() = out;
    const Tensor partial = matmul(x.reshape({-1, in}), weight).view(os);
    y = split ? dist::reducescatter_forward_gather_backward(partial, opts_.seq_dim, tp_) : dist::reduce_forward(partial, tp_);
  }
  if (!bias.defined()) return y;
  // On sequence shards each rank adds the bias to its own tokens: its gradient is completed over tp.
  return add(y, split ? dist::reduce_backward(bias.get(), tp_) : bias.get());
}

std::shared_ptr<Module> GPT2FusedLinearConv1DRow::fresh() const {
  return fresh_conv<GPT2FusedLinearConv1DRow>(weight, bias, tp_, opts_);
}

}  // namespace booster::nn
