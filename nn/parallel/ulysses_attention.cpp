// Ulysses attention (see ulysses_attention.h).
#include "nn/parallel/ulysses_attention.h"

#include "core/common/check.h"
#include "core/dist/functional.h"

namespace booster::nn {

UlyssesViTSelfAttention::UlyssesViTSelfAttention(const ViTSelfAttention& native, const dist::ProcessGroup& sp,
                                                 int64_t tokens)
    : ViTSelfAttention(native, Adopt{}), sp_(sp), tokens_(tokens) {
  BOOSTER_CHECK(num_attention_heads % sp.size() == 0, "UlyssesViTSelfAttention: ", num_attention_heads,
                " attention heads do not divide over a sequence-parallel group of ", sp.size());
  BOOSTER_CHECK(tokens >= sp.size(), "UlyssesViTSelfAttention: ", tokens, " tokens over ", sp.size(),
                " ranks leave a rank without any");
}

std::shared_ptr<UnaryModule> UlyssesViTSelfAttention::from_native_module(const std::shared_ptr<Module>& native,
                                                                         const dist::ProcessGroup& sp, int64_t tokens) {
  auto* att = dynamic_cast<ViTSelfAttention*>(native.get());
  BOOSTER_CHECK(att != nullptr, "UlyssesViTSelfAttention: expects a ViTSelfAttention, got a ", native->type_name());
  return std::make_shared<UlyssesViTSelfAttention>(*att, sp, tokens);
}

Tensor UlyssesViTSelfAttention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), d = attention_head_size, h = num_attention_heads;
  BOOSTER_CHECK_T(ShapeError, hidden.dim() == 3 && t == dist::balanced_chunk(tokens_, sp_.size(), sp_.rank()).second,
                  "UlyssesViTSelfAttention: expects [batch, ", dist::balanced_chunk(tokens_, sp_.size(), sp_.rank()).second,
                  " tokens (this rank's share of ", tokens_, "), hidden], got ", shape_str(hidden.shape()));
  // [B, t, h*d] -> [B, t, h, d] -> (heads scattered, tokens gathered) [B, T, h/sp, d] -> [B, h/sp, T, d]
  auto gathered = [&](const Tensor& x) {
    return dist::all_to_all_along(x.reshape({b, t, h, d}), 2, 1, sp_, true, tokens_).permute({0, 2, 1, 3});
  };
  std::vector<Tensor> qkv = projections(hidden);
  Tensor ctx = attend(gathered(qkv[0]), gathered(qkv[1]), gathered(qkv[2])).permute({0, 2, 1, 3});  // [B, T, h/sp, d]
  ctx = dist::all_to_all_along(ctx, 1, 2, sp_, true, h);  // tokens scattered, heads gathered: [B, t, h, d]
  return ctx.reshape({b, t, all_head_size});
}

std::shared_ptr<Module> UlyssesViTSelfAttention::fresh() const {
  return std::make_shared<UlyssesViTSelfAttention>(*this, sp_, tokens_);
}

}  // namespace booster::nn
