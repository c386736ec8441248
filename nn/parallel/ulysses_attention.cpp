// Ulysses attention (see ulysses_attention.h).
#include "nn/parallel/ulysses_attention.h"

#include <cmath>

#include "core/common/check.h"
#include "core/dist/functional.h"

namespace booster::nn {

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const dist::ProcessGroup& sp, int64_t tokens,
                         const HeadsAttention& attend) {
  const int n = sp.size();
  BOOSTER_CHECK_T(ShapeError, q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "Ulysses attention: q, k, v must be ",
                  "[batch, tokens, heads, head_dim], got ", shape_str(q.shape()));
  BOOSTER_CHECK(q.size(2) % n == 0 && k.size(2) % n == 0, "Ulysses attention: ", q.size(2), " query and ", k.size(2),
                " key/value heads do not divide over a sequence-parallel group of ", n);
  const int64_t t = dist::balanced_chunk(tokens, n, sp.rank()).second;
  BOOSTER_CHECK_T(ShapeError, q.size(1) == t, "Ulysses attention: expects this rank's ", t, " of ", tokens,
                  " tokens, got ", shape_str(q.shape()));
  // heads scattered, tokens gathered: [B, t, h, d] -> [B, T, h / sp, d]
  auto gathered = [&](const Tensor& x) { return dist::all_to_all_along(x.contiguous(), 2, 1, sp, true, tokens); };
  Tensor ctx = attend(gathered(q), gathered(k), gathered(v));
  return dist::all_to_all_along(ctx.contiguous(), 1, 2, sp, true, q.size(2));  // tokens scattered, heads gathered
}

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
  return std::make_shared<UlyssesViTSelfAttention>(
      native_as<ViTSelfAttention>(native, "UlyssesViTSelfAttention", "a ViTSelfAttention"), sp, tokens);
}

Tensor UlyssesViTSelfAttention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), d = attention_head_size, h = num_attention_heads;
  BOOSTER_CHECK_T(ShapeError, hidden.dim() == 3 && t == dist::balanced_chunk(tokens_, sp_.size(), sp_.rank()).second,
                  "UlyssesViTSelfAttention: expects [batch, ", dist::balanced_chunk(tokens_, sp_.size(), sp_.rank()).second,
                  " tokens (this rank's share of ", tokens_, "), hidden], got ", shape_str(hidden.shape()));
  std::vector<Tensor> qkv = projections(hidden);
  auto heads = [&](const Tensor& x) { return x.reshape({b, t, h, d}); };
  // attend works on [B, heads, T, d]
  auto whole = [this](const Tensor& q, const Tensor& k, const Tensor& v) {
    auto bhtd = [](const Tensor& x) { return x.permute({0, 2, 1, 3}); };
    return attend(bhtd(q), bhtd(k), bhtd(v)).permute({0, 2, 1, 3});
  };
  return ulysses_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), sp_, tokens_, whole).reshape({b, t, all_head_size});
}

std::shared_ptr<Module> UlyssesViTSelfAttention::fresh() const {
  return std::make_shared<UlyssesViTSelfAttention>(*this, sp_, tokens_);
}

}  // namespace booster::nn
