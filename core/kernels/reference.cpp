// Reference loops (see reference.h).
#include "core/kernels/reference.h"

#include <cmath>
#include <vector>

namespace booster::kernels::ref {

void matmul(const float* a, const float* w, float* c, int64_t batch, int64_t m, int64_t k, int64_t n, bool w_batched) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* A = a + bi * m * k;
    const float* W = w + (w_batched ? bi * k * n : 0);
    float* C = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += double(A[i * k + p]) * W[p * n + j];
        C[i * n + j] = float(s);
      }
  }
}

namespace {
inline int64_t xi(const ConvShape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * s.c + c) * s.h + h) * s.w + w;
}
inline int64_t wi(const ConvShape& s, int64_t o, int64_t c, int64_t h, int64_t w) {
  return ((o * s.c + c) * s.kh + h) * s.kw + w;
}
inline int64_t yi(const ConvShape& s, int64_t n, int64_t o, int64_t h, int64_t w) {
  return ((n * s.o + o) * s.oh + h) * s.ow + w;
}
// Calls f(input h, input w, kernel h, kernel w) for each tap of output (oh, ow) inside the image.
template <typename F>
void taps(const ConvShape& s, int64_t oh, int64_t ow, F&& f) {
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j) {
      const int64_t h = oh * s.sh - s.ph + i, w = ow * s.sw - s.pw + j;
      if (h >= 0 && h < s.h && w >= 0 && w < s.w) f(h, w, i, j);
    }
}
}  // namespace

void conv2d_fwd(const ConvShape& s, const float* x, const float* wt, const float* b, float* y) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          double acc = b ? b[o] : 0.0;
          for (int64_t c = 0; c < s.c; ++c)
            taps(s, oh, ow, [&](int64_t h, int64_t w, int64_t i, int64_t j) {
              acc += double(x[xi(s, n, c, h, w)]) * wt[wi(s, o, c, i, j)];
            });
          y[yi(s, n, o, oh, ow)] = float(acc);
        }
}

void conv2d_bwd_data(const ConvShape& s, const float* dy, const float* wt, float* dx) {
  std::vector<double> acc(size_t(s.n * s.c * s.h * s.w), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          const double g = dy[yi(s, n, o, oh, ow)];
          for (int64_t c = 0; c < s.c; ++c)
            taps(s, oh, ow, [&](int64_t h, int64_t w, int64_t i, int64_t j) {
              acc[size_t(xi(s, n, c, h, w))] += g * wt[wi(s, o, c, i, j)];
            });
        }
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = float(acc[i]);
}

void conv2d_bwd_weight(const ConvShape& s, const float* x, const float* dy, float* dw, float* db) {
  std::vector<double> acc(size_t(s.o * s.c * s.kh * s.kw), 0.0), bacc(size_t(s.o), 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          const double g = dy[yi(s, n, o, oh, ow)];
          bacc[size_t(o)] += g;
          for (int64_t c = 0; c < s.c; ++c)
            taps(s, oh, ow, [&](int64_t h, int64_t w, int64_t i, int64_t j) {
              acc[size_t(wi(s, o, c, i, j))] += g * x[xi(s, n, c, h, w)];
            });
        }
  for (size_t i = 0; i < acc.size(); ++i) dw[i] = float(acc[i]);
  if (db)
    for (int64_t o = 0; o < s.o; ++o) db[o] = float(bacc[size_t(o)]);
}

void layer_norm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t rows,
                    int64_t c, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mu += xr[i];
    mu /= double(c);
    for (int64_t i = 0; i < c; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= double(c);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < c; ++i) y[r * c + i] = float((xr[i] - mu) * rs * (w ? w[i] : 1.0) + (b ? b[i] : 0.0));
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
}

void layer_norm_bwd(const float* x, const float* w, const float* mean, const float* rstd, const float* dy, float* dx,
                    float* dw, float* db, int64_t rows, int64_t c) {
  std::vector<double> gw(size_t(c), 0.0), gb(size_t(c), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    const float* g = dy + r * c;
    double sum_g = 0, sum_gx = 0;
    for (int64_t i = 0; i < c; ++i) {
      const double xhat = (xr[i] - mean[r]) * double(rstd[r]);
      const double gi = g[i] * (w ? double(w[i]) : 1.0);
      sum_g += gi;
      sum_gx += gi * xhat;
      gw[size_t(i)] += g[i] * xhat;
      gb[size_t(i)] += g[i];
    }
    for (int64_t i = 0; i < c; ++i) {
      const double xhat = (xr[i] - mean[r]) * double(rstd[r]);
      const double gi = g[i] * (w ? double(w[i]) : 1.0);
      dx[r * c + i] = float(rstd[r] * (gi - sum_g / double(c) - xhat * sum_gx / double(c)));
    }
  }
  for (int64_t i = 0; i < c; ++i) {
    if (dw) dw[i] = float(gw[size_t(i)]);
    if (db) db[i] = float(gb[size_t(i)]);
  }
}

void softmax_fwd(const float* x, float* y, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < c; ++i) mx = std::max(mx, double(xr[i]));
    for (int64_t i = 0; i < c; ++i) s += std::exp(xr[i] - mx);
    for (int64_t i = 0; i < c; ++i) y[r * c + i] = float(std::exp(xr[i] - mx) / s);
  }
}

void softmax_bwd(const float* y, const float* dy, float* dx, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t i = 0; i < c; ++i) dot += double(y[r * c + i]) * dy[r * c + i];
    for (int64_t i = 0; i < c; ++i) dx[r * c + i] = float(y[r * c + i] * (dy[r * c + i] - dot));
  }
}

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluC = 0.044715;
}  // namespace

void gelu_fwd(const float* x, float* y, int64_t n, bool tanh_approx) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = tanh_approx ? float(0.5 * v * (1 + std::tanh(kSqrt2OverPi * (v + kGeluC * v * v * v))))
                       : float(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  }
}

void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n, bool tanh_approx) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    double d;
    if (tanh_approx) {
      const double u = kSqrt2OverPi * (v + kGeluC * v * v * v);
      const double t = std::tanh(u);
      d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kGeluC * v * v);
    } else {
      d = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    }
    dx[i] = float(dy[i] * d);
  }
}

}  // namespace booster::kernels::ref
