// The op test table (see op_cases.h).
#include "op_cases.h"

#include <cmath>

namespace booster::testing {

namespace {
// Keeps values away from zero (divisors).
void away_from_zero(std::vector<float>& v, size_t input) {
  if (input == 1)
    for (float& f : v) f = f >= 0 ? f + 0.5f : f - 0.5f;
}
}  // namespace

std::vector<OpCase> op_cases() {
  std::vector<OpCase> c;
  c.push_back({"matmul_2d", {{5, 7}, {7, 3}}, [](auto& x) { return matmul(x[0], x[1]); }, {}});
  c.push_back({"matmul_batched", {{2, 3, 4, 5}, {2, 3, 5, 6}}, [](auto& x) { return matmul(x[0], x[1]); }, {}});
  c.push_back({"matmul_shared_rhs", {{2, 4, 5}, {5, 3}}, [](auto& x) { return matmul(x[0], x[1]); }, {}});
  c.push_back({"matmul_transposed_views",
               {{2, 5, 4}, {2, 6, 5}},
               [](auto& x) { return matmul(x[0].transpose(1, 2), x[1].transpose(1, 2)); },
               {}});
  c.push_back({"matmul_permuted_heads",  // attention layout: [B, T, H, D] -> [B, H, T, D]
               {{2, 5, 3, 4}, {2, 5, 3, 4}},
               [](auto& x) { return matmul(x[0].permute({0, 2, 1, 3}), x[1].permute({0, 2, 3, 1})); },
               {}});
  c.push_back({"attention_heads",  // q, k, v as heads of [B, T, h, d]; keys longer than queries
               {{2, 5, 3, 4}, {2, 6, 3, 4}, {2, 6, 3, 2}},
               [](auto& x) {
                 auto heads = [](const Tensor& t) { return t.permute({0, 2, 1, 3}); };
                 return scaled_dot_product_attention(heads(x[0]), heads(x[1]), heads(x[2]));
               },
               {}});
  c.push_back({"attention_large_scaled", {{2, 2, 20, 16}, {2, 2, 20, 16}, {2, 2, 20, 16}},
               [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], 0.0, 0.3); }, {}});
  c.push_back({"linear", {{2, 3, 8}, {5, 8}, {5}}, [](auto& x) { return linear(x[0], x[1], x[2]); }, {}});
  // Above the tiny-problem threshold, so the oneDNN path runs.
  c.push_back({"matmul_large", {{2, 40, 24}, {2, 24, 20}}, [](auto& x) { return matmul(x[0], x[1]); }, {}});
  c.push_back({"matmul_large_transposed", {{2, 24, 40}, {2, 20, 24}},
               [](auto& x) { return matmul(x[0].transpose(1, 2), x[1].transpose(1, 2)); }, {}});
  c.push_back({"linear_large", {{3, 16, 24}, {20, 24}, {20}}, [](auto& x) { return linear(x[0], x[1], x[2]); }, {}});
  c.push_back({"linear_no_bias", {{4, 8}, {6, 8}}, [](auto& x) { return linear(x[0], x[1]); }, {}});
  // q, k and v from one stacked product into attention (whose gradients come back as the
  // pieces of one, read in place; scaled so the softmax does not saturate, and without
  // biases: the key's has a zero gradient by construction), and uneven widths with biases
  // and an unused output (its gradient zeros).
  c.push_back({"stacked_linear_attention", {{2, 5, 8}, {8, 8}, {8, 8}, {8, 8}}, [](auto& x) {
                 std::vector<Tensor> o = stacked_linear(x[0], {x[1], x[2], x[3]});
                 auto heads = [](const Tensor& t) { return scale(t, 0.25).view({2, 5, 2, 4}).permute({0, 2, 1, 3}); };
                 return scaled_dot_product_attention(heads(o[0]), heads(o[1]), heads(o[2]));
               }, {}});
  c.push_back({"stacked_linear_uneven", {{3, 16, 24}, {20, 24}, {12, 24}, {8, 24}, {20}, {12}, {8}}, [](auto& x) {
                 std::vector<Tensor> o = stacked_linear(x[0], {x[1], x[2], x[3]}, {x[4], x[5], x[6]});
                 return concat({scale(o[0], 2.0), o[2]}, -1);
               }, {}});
  c.push_back({"conv2d_patch", {{2, 3, 8, 8}, {5, 3, 4, 4}, {5}},
               [](auto& x) { return conv2d(x[0], x[1], x[2], {4, 4}); }, {}});
  c.push_back({"conv2d_padded", {{2, 3, 7, 6}, {4, 3, 3, 3}, {4}},
               [](auto& x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}); }, {}});
  c.push_back({"layer_norm", {{3, 4, 16}, {16}, {16}},
               [](auto& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }, {}});
  c.push_back({"layer_norm_no_affine", {{6, 10}}, [](auto& x) { return layer_norm(x[0], {}, {}, 1e-5); }, {}});
  c.push_back({"rms_norm", {{3, 4, 16}, {16}}, [](auto& x) { return rms_norm(x[0], x[1], 1e-6); }, {}});
  c.push_back({"rotary_embedding", {{2, 3, 2, 8}}, [](auto& x) { return rotary_embedding(x[0], 5, 100.0); }, {}});
  c.push_back({"silu", {{4, 33}}, [](auto& x) { return silu(x[0]); }, {}});
  c.push_back({"softmax", {{3, 4, 9}}, [](auto& x) { return softmax(x[0]); }, {}});
  c.push_back({"gelu_erf", {{4, 33}}, [](auto& x) { return gelu(x[0]); }, {}});
  c.push_back({"gelu_tanh", {{4, 33}}, [](auto& x) { return gelu(x[0], "tanh"); }, {}});
  c.push_back({"dropout", {{8, 16}}, [](auto& x) {
                 Generator g(3);
                 return dropout(x[0], 0.25, true, g);
               }, {}});
  c.push_back({"add_broadcast", {{2, 3, 4}, {3, 1}}, [](auto& x) { return add(x[0], x[1]); }, {}});
  c.push_back({"add_broadcast_left", {{1, 4}, {3, 4}}, [](auto& x) { return add(x[0], x[1]); }, {}});
  c.push_back({"sub", {{3, 4}, {3, 4}}, [](auto& x) { return sub(x[0], x[1]); }, {}});
  c.push_back({"mul_broadcast", {{2, 3, 4}, {4}}, [](auto& x) { return mul(x[0], x[1]); }, {}});
  c.push_back({"div_broadcast", {{2, 3, 4}, {2, 1, 4}}, [](auto& x) { return div(x[0], x[1]); }, away_from_zero});
  c.push_back({"scale", {{5, 3}}, [](auto& x) { return scale(x[0], -2.5); }, {}});
  c.push_back({"add_scalar", {{5, 3}}, [](auto& x) { return add_scalar(x[0], 4.0); }, {}});
  c.push_back({"concat", {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}},
               [](auto& x) { return concat({x[0], x[1], x[2]}, 1); }, {}});
  c.push_back({"slice_select", {{4, 6, 3}},
               [](auto& x) { return x[0].slice(1, 1, 5).select(0, 2) * 3.0; }, {}});
  c.push_back({"views", {{2, 3, 4}},
               [](auto& x) { return x[0].permute({2, 0, 1}).reshape({4, 6}).unsqueeze(0).expand({3, 4, 6}); }, {}});
  c.push_back({"sum_dims", {{3, 4, 5}}, [](auto& x) { return sum(x[0], {0, 2}); }, {}});
  c.push_back({"sum_dim0", {{7, 6}}, [](auto& x) { return sum(x[0], {0}, true); }, {}});
  // A bias gradient's shape (columns summed in pieces of 256) and rows longer than a piece.
  c.push_back({"sum_wide_columns", {{5, 300}}, [](auto& x) { return sum(x[0], {0}); }, {}});
  c.push_back({"sum_long_rows", {{2, 600}}, [](auto& x) { return sum(x[0], {1}); }, {}});
  c.push_back({"mean_all", {{3, 4}}, [](auto& x) { return mean(x[0]); }, {}});
  c.push_back({"mean_last", {{3, 4, 5}}, [](auto& x) { return mean(x[0], {-1}); }, {}});
  // Causal attention on [B, h, T, d] (2 heads, 5 tokens): every query its keys 0..i.
  c.push_back({"causal_attention", {{2, 2, 5, 3}, {2, 2, 5, 3}, {2, 2, 5, 3}},
               [](auto& x) { return causal_attention(x[0], x[1], x[2]); }});
  // The same on the layout heads split from [B, T, h, d] memory (a permuted view).
  c.push_back({"causal_attention_head_views", {{1, 4, 2, 3}, {1, 4, 2, 3}, {1, 4, 2, 3}}, [](auto& x) {
                 return causal_attention(x[0].permute({0, 2, 1, 3}), x[1].permute({0, 2, 1, 3}), x[2].permute({0, 2, 1, 3}));
               }});
  c.push_back({"causal_attention_long", {{1, 1, 33, 8}, {1, 1, 33, 8}, {1, 1, 33, 8}},
               [](auto& x) { return causal_attention(x[0], x[1], x[2]); }});
  // Repeated ids: their rows' gradients add up.
  c.push_back({"embedding", {{5, 3}}, [](auto& x) { return embedding(x[0], Tensor::from_ints({4, 0, 2, 4, 1, 4}, {2, 3})); }});
  c.push_back({"cross_entropy", {{6, 5}}, [](auto& x) {
                 return cross_entropy(x[0], Tensor::from_ints({0, 4, 2, 2, 1, 3}, {6}));
               }, {}});
  c.push_back({"cross_entropy_smooth_ignore", {{6, 5}}, [](auto& x) {
                 CrossEntropyOptions o;
                 o.label_smoothing = 0.1;
                 o.ignore_index = -1;
                 return cross_entropy(x[0], Tensor::from_ints({0, -1, 2, 4, -1, 3}, {6}), o);
               }, {}});
  c.push_back({"cross_entropy_soft", {{4, 3}}, [](auto& x) {
                 Tensor q = Tensor::from_vector({0.7f, 0.3f, 0, 0, 1, 0, 0.2f, 0.2f, 0.6f, 0.5f, 0, 0.5f}, {4, 3},
                                                x[0].dtype());
                 return cross_entropy_soft(x[0], q, 0.05);
               }, {}});
  return c;
}

}  // namespace booster::testing
