// LayerNorm on sequence shards (see layernorm.h).
#include "nn/parallel/layernorm.h"

#include "core/dist/functional.h"

namespace booster::nn {

std::shared_ptr<UnaryModule> SequenceParallelLayerNorm::from_native_module(const std::shared_ptr<Module>& native,
                                                                           const dist::ProcessGroup& tp,
                                                                           int64_t gather_seq_len, int64_t seq_dim) {
  if (auto done = std::dynamic_pointer_cast<SequenceParallelLayerNorm>(native)) return done;
  auto* ln = dynamic_cast<LayerNorm*>(native.get());
  BOOSTER_CHECK(ln != nullptr, "SequenceParallelLayerNorm.from_native_module: expects a LayerNorm, got a ",
                native ? native->type_name() : "null module");
  return std::make_shared<SequenceParallelLayerNorm>(ln->weight.defined() ? ln->weight.get() : Tensor(),
                                                     ln->bias.defined() ? ln->bias.get() : Tensor(), ln->eps(), tp,
                                                     gather_seq_len, seq_dim);
}

SequenceParallelLayerNorm::SequenceParallelLayerNorm(Tensor w, Tensor b, double eps, const dist::ProcessGroup& tp,
                                                     int64_t gather_seq_len, int64_t seq_dim)
    : eps_(eps), tp_(tp), gather_len_(gather_seq_len), seq_dim_(seq_dim) {
  weight = register_parameter("weight", w, w.defined() && w.requires_grad());
  bias = register_parameter("bias", b, b.defined() && b.requires_grad());
}

// x: [B, T/tp, C] -> [B, T/tp, C]
Tensor SequenceParallelLayerNorm::forward(const Tensor& x) {
  auto full_grad = [&](const TensorSlot& p) { return p.defined() ? dist::reduce_backward(p.get(), tp_) : Tensor(); };
  Tensor y = layer_norm(x, full_grad(weight), full_grad(bias), eps_);
  return gather_len_ > 0 ? dist::gather_forward_reducescatter_backward(y, seq_dim_, tp_, gather_len_) : y;
}

std::shared_ptr<Module> SequenceParallelLayerNorm::fresh() const {
  auto like = [](const TensorSlot& p) { return p.defined() ? Tensor::empty(p->shape(), p->dtype()) : Tensor(); };
  return std::make_shared<SequenceParallelLayerNorm>(like(weight), like(bias), eps_, tp_, gather_len_, seq_dim_);
}

}  // namespace booster::nn
