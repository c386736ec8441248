// LayerNorm on sequence shards (see layernorm.h).
#include "nn/parallel/layernorm.h"

#include "core/dist/functional.h"

namespace booster::nn {

std::shared_ptr<UnaryModule> SequenceParallelLayerNorm::from_native_module(const std::shared_ptr<Module>& native,
                                                                           const dist::ProcessGroup& tp,
                                                                           int64_t gather_seq_len, int64_t seq_dim) {
  if (auto done = std::dynamic_pointer_cast<SequenceParallelLayerNorm>(native)) return done;
  auto* ln = dynamic_cast<LayerNorm*>(native.get());
  BOOSTER_CHECK(ln != nullptr && ln->weight.defined(),
                "SequenceParallelLayerNorm.from_native_module: expects an affine LayerNorm, got a ",
                native ? native->type_name() : "null module");
  return std::make_shared<SequenceParallelLayerNorm>(ln->weight.get(), ln->bias.get(), ln->eps(), tp, gather_seq_len,
                                                     seq_dim);
}

SequenceParallelLayerNorm::SequenceParallelLayerNorm(Tensor w, Tensor b, double eps, const dist::ProcessGroup& tp,
                                                     int64_t gather_seq_len, int64_t seq_dim)
    : LayerNorm(std::move(w), std::move(b), eps), tp_(tp), gather_len_(gather_seq_len), seq_dim_(seq_dim) {}

// x: [B, T/tp, C] -> [B, T/tp, C] (or [B, T, C] gathered)
Tensor SequenceParallelLayerNorm::forward(const Tensor& x) {
  Tensor y = normalize(x, dist::reduce_backward(weight, tp_), bias.defined() ? dist::reduce_backward(bias, tp_) : Tensor());
  return gather_len_ > 0 ? dist::gather_forward_reducescatter_backward(y, seq_dim_, tp_, gather_len_) : y;
}

std::shared_ptr<Module> SequenceParallelLayerNorm::fresh() const {
  return std::make_shared<SequenceParallelLayerNorm>(Tensor::empty(weight->shape(), weight->dtype()),
                                                     bias.defined() ? Tensor::empty(bias->shape(), bias->dtype()) : Tensor(),
                                                     eps(), tp_, gather_len_, seq_dim_);
}

std::shared_ptr<UnaryModule> SequenceParallelRMSNorm::from_native_module(const std::shared_ptr<Module>& native,
                                                                         const dist::ProcessGroup& tp) {
  if (auto done = std::dynamic_pointer_cast<SequenceParallelRMSNorm>(native)) return done;
  auto& n = native_as<LlamaRMSNorm>(native, "SequenceParallelRMSNorm", "a LlamaRMSNorm");
  return std::make_shared<SequenceParallelRMSNorm>(n.weight.get(), n.eps(), tp);
}

// x: [B, T/tp, C] -> [B, T/tp, C]
Tensor SequenceParallelRMSNorm::forward(const Tensor& x) { return rms_norm(x, dist::reduce_backward(weight, tp_), eps()); }

std::shared_ptr<Module> SequenceParallelRMSNorm::fresh() const {
  return std::make_shared<SequenceParallelRMSNorm>(Tensor::empty(weight->shape(), weight->dtype()), eps(), tp_);
}

}  // namespace booster::nn
