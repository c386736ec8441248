// The language models' sequence-parallel attentions (see sp_attention.h).
#include "nn/parallel/sp_attention.h"

#include <cmath>

#include "core/common/check.h"
#include "nn/parallel/ring_attention.h"
#include "nn/parallel/ulysses_attention.h"

namespace booster::nn {

namespace {
std::string mode_name(SequenceMode m) { return m == SequenceMode::ulysses ? "Ulysses" : "Ring"; }
int64_t kv_heads(const GPT2Attention& a) { return a.num_heads; }
int64_t kv_heads(const LlamaAttention& a) { return a.num_key_value_heads; }
std::string native_name(const GPT2Attention*) { return "GPT2Attention"; }
std::string native_name(const LlamaAttention*) { return "LlamaAttention"; }
}  // namespace

template <typename Native>
SequenceParallelAttention<Native>::SequenceParallelAttention(const Native& native, const dist::ProcessGroup& sp,
                                                             SequenceMode mode)
    : Native(native, typename Native::Adopt{}), sp_(sp), mode_(mode) {
  BOOSTER_CHECK(mode != SequenceMode::ulysses || (this->num_heads % sp.size() == 0 && kv_heads(*this) % sp.size() == 0),
                type_name(), ": ", this->num_heads, " attention heads (", kv_heads(*this),
                " key/value heads) do not divide over a sequence-parallel group of ", sp.size());
}

template <typename Native>
std::shared_ptr<UnaryModule> SequenceParallelAttention<Native>::from_native_module(const std::shared_ptr<Module>& native,
                                                                                   const dist::ProcessGroup& sp,
                                                                                   SequenceMode mode) {
  const std::string native_type = native_name(static_cast<const Native*>(nullptr));
  return std::make_shared<SequenceParallelAttention>(
      native_as<Native>(native, mode_name(mode) + native_type, ("a " + native_type).c_str()), sp, mode);
}

template <typename Native>
std::string SequenceParallelAttention<Native>::type_name() const {
  return mode_name(mode_) + native_name(static_cast<const Native*>(nullptr));
}

template <typename Native>
std::shared_ptr<Module> SequenceParallelAttention<Native>::fresh() const {
  return std::make_shared<SequenceParallelAttention>(*this, sp_, mode_);
}

// hidden: [B, t, E] (this rank's tokens) -> [B, t, E]
template <>
Tensor SequenceParallelAttention<GPT2Attention>::forward(const Tensor& hidden) {
  Tensor qkv = c_attn(hidden);  // [B, t, 3 h d]
  const int64_t b = qkv.size(0), t = qkv.size(1), h = num_heads, d = head_dim;
  const double p = attention_dropout_p();
  Tensor ctx;  // [B, t, h, d]
  if (mode_ == SequenceMode::ring) {
    auto heads = [&](int64_t i) { return qkv.narrow(-1, i * h * d, h * d).view({b, t, h, d}).permute({0, 2, 1, 3}); };
    ctx = ring_attention(heads(0), heads(1), heads(2), sp_, 1.0 / std::sqrt(double(d)), p).permute({0, 2, 1, 3});
  } else {
    auto part = [&](int64_t i) { return qkv.narrow(-1, i * h * d, h * d).reshape({b, t, h, d}); };
    auto causal = [p](const Tensor& q, const Tensor& k, const Tensor& v) {
      auto bhtd = [](const Tensor& x) { return x.permute({0, 2, 1, 3}); };
      return causal_attention(bhtd(q), bhtd(k), bhtd(v), p).permute({0, 2, 1, 3});
    };
    ctx = ulysses_attention(part(0), part(1), part(2), sp_, t * sp_.size(), causal);
  }
  return resid_dropout(c_proj(ctx.reshape({b, t, h * d})));
}

// hidden: [B, t, E] (this rank's tokens) -> [B, t, E]
template <>
Tensor SequenceParallelAttention<LlamaAttention>::forward(const Tensor& hidden) {
  const int64_t b = hidden.size(0), t = hidden.size(1), h = num_heads, kv = num_key_value_heads, d = head_dim;
  Tensor q = q_proj(hidden).reshape({b, t, h, d});
  Tensor k = k_proj(hidden).reshape({b, t, kv, d});
  Tensor v = v_proj(hidden).reshape({b, t, kv, d});
  const double p = is_training() ? c_.attention_dropout : 0.0, theta = c_.rope_theta, scale = 1.0 / std::sqrt(double(d));
  auto bhtd = [](const Tensor& x) { return x.permute({0, 2, 1, 3}); };
  Tensor ctx;  // [B, t, h, d]
  if (mode_ == SequenceMode::ring) {
    const std::pair<int64_t, int64_t> at = zigzag_offsets(t, sp_);
    auto rotated = [&](const Tensor& x) {  // each zigzag chunk at its own positions
      return concat({rotary_embedding(x.narrow(1, 0, t / 2), at.first, theta),
                     rotary_embedding(x.narrow(1, t / 2, t / 2), at.second, theta)}, 1);
    };
    ctx = bhtd(ring_attention(bhtd(rotated(q)), bhtd(repeat_kv(rotated(k), h / kv, 2)), bhtd(repeat_kv(v, h / kv, 2)), sp_,
                              scale, p));
  } else {
    auto causal = [p, theta, scale, bhtd](const Tensor& qh, const Tensor& kh, const Tensor& vh) {  // positions 0..T-1
      const int64_t rep = qh.size(2) / kh.size(2);
      return bhtd(causal_attention(bhtd(rotary_embedding(qh, 0, theta)), bhtd(repeat_kv(rotary_embedding(kh, 0, theta), rep, 2)),
                                   bhtd(repeat_kv(vh, rep, 2)), p, scale));
    };
    ctx = ulysses_attention(q, k, v, sp_, t * sp_.size(), causal);
  }
  return o_proj(ctx.reshape({b, t, h * d}));
}

template class SequenceParallelAttention<GPT2Attention>;
template class SequenceParallelAttention<LlamaAttention>;

}  // namespace booster::nn
