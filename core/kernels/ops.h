// The differentiable ops a Vision Transformer and its training need. Each records its
// backward (see autograd/engine.h) and runs on oneDNN or vectorized loops, or on the plain
// reference loops under a ReferenceGuard. Float inputs of one op must share a dtype;
// bf16/f16 inputs are computed in f32 where oneDNN has no low-precision kernel.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace booster {

// ---- matmul family (matmul_ops.cpp) ----
/// a: [..., M, K] x b: [..., K, N] -> [..., M, N]; b may be 2-D (shared by every batch).
Tensor matmul(const Tensor& a, const Tensor& b);
/// x: [*, K], w: [N, K], b: [N] (optional) -> [*, N]. `label` (a string literal) names the op in
/// the profiler and its backward (the vocabulary heads' "lm head").
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const char* label = "linear");
/// linear() with several weights on one input, as one product: x: [*, K], w_i: [N_i, K],
/// b_i: [N_i] (a bias for each weight or none) -> [*, N_i] each, the outputs views of the
/// columns of one [*, sum N_i] result (attention's q, k and v from one product; the
/// gradients the attention backward gives them are read in place as one). The weights are
/// stacked per call, in the forward and again in the backward (no copy is held between).
std::vector<Tensor> stacked_linear(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs = {});

// ---- attention (attention_ops.cpp) ----
/// softmax(q k^T * scale) v over [B, h, T, d] views (PyTorch's scaled_dot_product_attention
/// without masks; Hugging Face's "sdpa" attention). scale defaults to 1/sqrt(d), applied by the
/// own kernels inside the score product (on oneDNN a pass of its own). The result is a [B, h, T, d] view of [B, T, h, d]
/// memory and the gradients take their inputs' layouts, so splitting and merging heads by
/// permute + view copies nothing. With dropout_p > 0 the probabilities go through dropout
/// (the default generator) on the composite path of matmul, softmax and dropout.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p = 0.0,
                                    std::optional<double> scale = std::nullopt);

/// Causal self-attention over [B, h, T, d] views (scaled_dot_product_attention with
/// is_causal=True): query i attends to keys 0..i. Only the causal half is computed and no
/// [T, T] matrix is kept for backward (an online softmax; one log-sum-exp a query). The
/// result is a [B, h, T, d] view of [B, T, h, d] memory. With dropout_p > 0 the
/// probabilities go through dropout on the composite path (masked scores, softmax, dropout).
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p = 0.0,
                        std::optional<double> scale = std::nullopt);

/// One block of FlashAttention, without autograd (ring attention's steps): q [B, h, Tq, d]
/// over k, v [B, h, Tk, d] (causal: Tq == Tk and query i sees keys 0..i; else all). out: f32
/// contiguous [B, h, Tq, d]; lse: f32 [B, h, Tq], each query's natural log-sum-exp of alpha q.k
/// over the block's keys. Blocks of one row combine by their lse.
struct AttentionBlock {
  Tensor out, lse;
};
/// Attention dropout inside blocks: row i drops key j's probability (the kept ones scaled by
/// 1 / (1 - p)) where the counter-based draw Generator(seed).at(c) falls below p, c = (head *
/// rows + row_offset + i) * keys + key_offset + j: a block's mask is the same in its forward
/// and its backward, and the blocks of a sequence draw disjoint counters. The lse stays the
/// undropped softmax's. Runs on the reference rows (as causal_attention's dropout path does).
struct BlockDropout {
  double p = 0;
  uint64_t seed = 0;
  int64_t row_offset = 0, rows = 0, key_offset = 0, keys = 0;
};
AttentionBlock attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double alpha,
                                       const BlockDropout& dropout = {});
/// The block's {dq, dk, dv} (f32 contiguous) from the whole rows' lse and delta (f32 [B, h, Tq]:
/// <dO, O> of the rows' final output): p = exp(alpha q.k - lse), dS = alpha p (dO.v - delta).
std::vector<Tensor> attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                             const Tensor& lse, const Tensor& delta, bool causal, double alpha,
                                             const BlockDropout& dropout = {});

/// Rotary position embedding of x [B, T, heads, d] at positions past .. past + T - 1
/// (transformers' LLaMA): frequency i = theta^(-2i / d) rotates the pair (x_i, x_{i + d/2}),
/// x cos + rotate_half(x) sin.
Tensor rotary_embedding(const Tensor& x, int64_t past, double theta);

// ---- convolution (conv_ops.cpp) ----
/// x: [B, C, H, W], w: [O, C, kh, kw], b: [O] (optional) -> [B, O, H', W'].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::pair<int64_t, int64_t> stride,
              std::pair<int64_t, int64_t> padding = {0, 0});

// ---- normalization and softmax (norm_ops.cpp) ----
/// Normalizes the last dim: (x - mean) / sqrt(var + eps) * w + b; w, b: [C].
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
/// Softmax over the last dim.
Tensor softmax(const Tensor& x);
/// x / sqrt(mean(x^2 over the last dim) + eps) * w, w: [C] (LLaMA's RMSNorm; f32 inside).
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);

// ---- activations (activation_ops.cpp) ----
/// GELU; approximate "none" (exact erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
/// x * sigmoid(x) (SiLU, swish; LLaMA's hidden_act "silu").
Tensor silu(const Tensor& x);
/// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
/// Dropout drawing from the default generator.
Tensor dropout(const Tensor& x, double p, bool training);

// ---- elementwise with broadcasting (binary_ops.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// x * s.
Tensor scale(const Tensor& x, double s);
/// x + s.
Tensor add_scalar(const Tensor& x, double s);
/// 1 / sqrt(x), elementwise (computed in f32, rounded once to x's dtype).
Tensor rsqrt(const Tensor& x);
/// Sums x down to `shape` (the reverse of broadcasting it).
Tensor sum_to(const Tensor& x, const Shape& shape);
/// The shape a and b broadcast to; throws ShapeError naming the op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, double s) { return scale(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return scale(a, s); }

// ---- reductions (reduce_ops.cpp) ----
/// Sum of all elements -> [].
Tensor sum(const Tensor& x);
/// Sum over `dims`.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
/// Mean of all elements -> [].
Tensor mean(const Tensor& x);
/// Mean over `dims`.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- losses (loss_ops.cpp) ----
/// Options of cross_entropy, as torch.nn.functional.cross_entropy.
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
/// logits: [N, C], target: [N] i64 class indices -> mean loss [] over non-ignored rows.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& opts = {});
/// logits: [N, C], target: [N, C] probabilities (soft targets, e.g. Mixup) -> mean loss [].
Tensor cross_entropy_soft(const Tensor& logits, const Tensor& target_probs, double label_smoothing = 0.0);

// ---- lookup (embedding_ops.cpp) ----
/// weight: [V, D], ids: [...] i64 -> [..., D] (torch.nn.functional.embedding); the
/// weight's gradient is dense. An id outside [0, V) is an error naming it.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// ---- joining (shape_ops.cpp) ----
/// Concatenates along dim.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace booster
