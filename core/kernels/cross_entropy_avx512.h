// Cross entropy over rows with class-index targets on AVX-512 (cross_entropy_avx512.cpp):
// a row's max, then 2^((x - max) log2 e) written as the gradient's base while summing it, then
// that base turned into p sum(q) - q in place. No [N, C] target matrix and one exponential
// an element: a language model's head has 50,257 columns a token.
#pragma once

#include <cstdint>

namespace booster::kernels {

/// For each row i of x [n, c] (f32, contiguous): grad_i = softmax(x_i) sum(q_i) - q_i with
/// q_i = (1 - smoothing) onehot(target_i) + smoothing / c, and loss_i = sum_j q_ij (lse_i -
/// x_ij); a row whose target is ignore_index gets zeros and does not count. Returns the rows
/// counted. grad may be x (each element is read before it is written).
/// Only where avx512::cpu_ok() (avx512_cpu.h).
int64_t cross_entropy_rows(const float* x, float* grad, const int64_t* target, float* loss, int64_t n, int64_t c,
                           double smoothing, int64_t ignore_index);

}  // namespace booster::kernels
