// Plain reference loops: the test oracle for every fast kernel. Contiguous f32 buffers,
// sums accumulated in double, no vectorization tricks, no threads.
#pragma once

#include <cstdint>

namespace booster::kernels::ref {

/// c[b] = a[b] (M x K) * w[b or 0] (K x N); w shared when w_batched is false.
void matmul(const float* a, const float* w, float* c, int64_t batch, int64_t m, int64_t k, int64_t n, bool w_batched);

/// Convolution forward, NCHW / OIHW.
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, oh, ow;
};
void conv2d_fwd(const ConvShape& s, const float* x, const float* wt, const float* b, float* y);
void conv2d_bwd_data(const ConvShape& s, const float* dy, const float* wt, float* dx);
void conv2d_bwd_weight(const ConvShape& s, const float* x, const float* dy, float* dw, float* db);

/// Layer norm over rows of length c; saves mean and rstd per row.
void layer_norm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t rows,
                    int64_t c, double eps);
void layer_norm_bwd(const float* x, const float* w, const float* mean, const float* rstd, const float* dy, float* dx,
                    float* dw, float* db, int64_t rows, int64_t c);

/// Softmax over rows of length c.
void softmax_fwd(const float* x, float* y, int64_t rows, int64_t c);
void softmax_bwd(const float* y, const float* dy, float* dx, int64_t rows, int64_t c);

/// GELU, exact (erf) or tanh approximation.
void gelu_fwd(const float* x, float* y, int64_t n, bool tanh_approx);
void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx);

}  // namespace booster::kernels::ref
