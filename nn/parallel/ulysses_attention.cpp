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
  auto* att = dynamic_cast<ViTSelfAttention*>(native.get());
  BOOSTER_CHECK(att != nullptr, "UlyssesViTSelfAttention: expects a ViTSelfAttention, got a ", native->type_name());
  return std::make_shared<UlyssesViTSelfAttention>(*att, sp, tokens);
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

UlyssesGPT2Attention::UlyssesGPT2Attention(const GPT2Attention& native, const dist::ProcessGroup& sp)
    : GPT2Attention(native, Adopt{}), sp_(sp) {
  BOOSTER_CHECK(num_heads % sp.size() == 0, "UlyssesGPT2Attention: n_head ", num_heads,
                " does not divide over a sequence-parallel group of ", sp.size());
}

std::shared_ptr<UnaryModule> UlyssesGPT2Attention::from_native_module(const std::shared_ptr<Module>& native,
                                                                      const dist::ProcessGroup& sp) {
  auto* att = dynamic_cast<GPT2Attention*>(native.get());
  BOOSTER_CHECK(att != nullptr, "UlyssesGPT2Attention: expects a GPT2Attention, got a ", native->type_name());
  return std::make_shared<UlyssesGPT2Attention>(*att, sp);
}

// hidden: [B, t, E] (this rank's tokens) -> [B, t, E]
Tensor UlyssesGPT2Attention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), h = num_heads, d = head_dim;
  Tensor qkv = c_attn(hidden);  // [B, t, 3 h d]
  auto part = [&](int64_t i) { return qkv.narrow(-1, i * h * d, h * d).reshape({b, t, h, d}); };
  const double p = attention_dropout_p();
  auto causal = [p](const Tensor& q, const Tensor& k, const Tensor& v) {
    auto bhtd = [](const Tensor& x) { return x.permute({0, 2, 1, 3}); };
    return causal_attention(bhtd(q), bhtd(k), bhtd(v), p).permute({0, 2, 1, 3});
  };
  Tensor ctx = ulysses_attention(part(0), part(1), part(2), sp_, t * sp_.size(), causal);
  return resid_dropout(c_proj(ctx.reshape({b, t, h * d})));
}

std::shared_ptr<Module> UlyssesGPT2Attention::fresh() const { return std::make_shared<UlyssesGPT2Attention>(*this, sp_); }

UlyssesLlamaAttention::UlyssesLlamaAttention(const LlamaAttention& native, const dist::ProcessGroup& sp)
    : LlamaAttention(native, Adopt{}), sp_(sp) {
  BOOSTER_CHECK(num_heads % sp.size() == 0 && num_key_value_heads % sp.size() == 0, "UlyssesLlamaAttention: ",
                num_heads, " attention heads and ", num_key_value_heads,
                " key/value heads must both divide over a sequence-parallel group of ", sp.size());
}

std::shared_ptr<UnaryModule> UlyssesLlamaAttention::from_native_module(const std::shared_ptr<Module>& native,
                                                                       const dist::ProcessGroup& sp) {
  auto* att = dynamic_cast<LlamaAttention*>(native.get());
  BOOSTER_CHECK(att != nullptr, "UlyssesLlamaAttention: expects a LlamaAttention, got a ", native->type_name());
  return std::make_shared<UlyssesLlamaAttention>(*att, sp);
}

// hidden: [B, t, E] (this rank's tokens) -> [B, t, E]
Tensor UlyssesLlamaAttention::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), h = num_heads, kv = num_key_value_heads, d = head_dim;
  Tensor q = q_proj(hidden).reshape({b, t, h, d});
  Tensor k = k_proj(hidden).reshape({b, t, kv, d});
  Tensor v = v_proj(hidden).reshape({b, t, kv, d});
  const double p = is_training() ? c_.attention_dropout : 0.0, theta = c_.rope_theta, scale = 1.0 / std::sqrt(double(d));
  auto causal = [p, theta, scale](const Tensor& qh, const Tensor& kh, const Tensor& vh) {  // the whole sequence: positions 0..T-1
    const int64_t rep = qh.size(2) / kh.size(2);
    auto bhtd = [](const Tensor& x) { return x.permute({0, 2, 1, 3}); };
    return causal_attention(bhtd(rotary_embedding(qh, 0, theta)), bhtd(repeat_kv(rotary_embedding(kh, 0, theta), rep, 2)),
                            bhtd(repeat_kv(vh, rep, 2)), p, scale)
        .permute({0, 2, 1, 3});
  };
  Tensor ctx = ulysses_attention(q, k, v, sp_, t * sp_.size(), causal);
  return o_proj(ctx.reshape({b, t, h * d}));
}

std::shared_ptr<Module> UlyssesLlamaAttention::fresh() const { return std::make_shared<UlyssesLlamaAttention>(*this, sp_); }

}  // namespace booster::nn
