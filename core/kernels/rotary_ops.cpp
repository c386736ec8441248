// Rotary position embedding (RoPE) as transformers applies it to LLaMA's queries and keys:
// frequency i (theta^(-2i / d)) rotates the pair (x_i, x_{i + d/2}) by position x frequency,
// so y = x cos + rotate_half(x) sin with rotate_half(x) = (-x2, x1). The backward is the
// rotation by the opposite angle. One pass over x in f32; the angles as transformers
// computes them (f32 inverse frequencies times f32 positions).
#include <cmath>
#include <vector>

#include "core/autograd/engine.h"
#include "core/common/parallel.h"
#include "core/common/profiler.h"
#include "core/kernels/op_util.h"
#include "core/kernels/ops.h"

namespace booster {

namespace {

// cos and sin [T, d / 2] of positions past .. past + T - 1.
std::pair<std::vector<float>, std::vector<float>> angles(int64_t t, int64_t d, int64_t past, double theta) {
  const int64_t half = d / 2;
  std::vector<float> c(size_t(t * half)), s(size_t(t * half));
  for (int64_t i = 0; i < half; ++i) {
    const float inv = float(1.0 / std::pow(theta, double(2 * i) / double(d)));
    for (int64_t p = 0; p < t; ++p) {
      const float a = float(past + p) * inv;
      c[size_t(p * half + i)] = std::cos(a), s[size_t(p * half + i)] = std::sin(a);
    }
  }
  return {std::move(c), std::move(s)};
}

// y = rotation of x by +angle (sign 1) or -angle (sign -1); x, y: [rows = B T H, d] with row r at position (r / H) % T.
void rotate(const float* x, float* y, int64_t rows, int64_t heads, int64_t t, int64_t d, const std::vector<float>& c,
            const std::vector<float>& s, float sign) {
  const int64_t half = d / 2;
  parallel_for(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t p = (r / heads) % t;
      const float *cr = c.data() + p * half, *sr = s.data() + p * half, *xr = x + r * d;
      float* yr = y + r * d;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xr[i], x2 = xr[i + half], sn = sign * sr[i];
        yr[i] = x1 * cr[i] - x2 * sn;
        yr[i + half] = x2 * cr[i] + x1 * sn;
      }
    }
  });
}

}  // namespace

// x: [B, T, H, d] -> [B, T, H, d]
Tensor rotary_embedding(const Tensor& x, int64_t past, double theta) {
  ProfileScope prof_("rotary_embedding");
  kernels::check_floating("rotary_embedding", x);
  BOOSTER_CHECK_T(ShapeError, x.dim() == 4 && x.size(-1) % 2 == 0,
                  "rotary_embedding: x must be [batch, tokens, heads, head_dim] with head_dim even, got ",
                  shape_str(x.shape()));
  BOOSTER_CHECK(past >= 0 && theta > 0, "rotary_embedding: past (", past, ") must be >= 0 and theta (", theta,
                ") positive");
  const int64_t t = x.size(1), h = x.size(2), d = x.size(3), rows = x.numel() / d;
  auto [c, s] = angles(t, d, past, theta);
  const Tensor xs = kernels::f32_contig(x.detach());
  Tensor y = Tensor::empty(x.shape());
  rotate(xs.data<float>(), y.data<float>(), rows, h, t, d, c, s, 1.f);
  const DType dt = x.dtype();
  return autograd::record("rotary_embedding", {x}, y.to(dt),
                          [c = std::move(c), s = std::move(s), rows, h, t, d, dt](const std::vector<Tensor>& g) {
                            const Tensor gs = kernels::f32_contig(g[0]);
                            Tensor dx = Tensor::empty(gs.shape());
                            rotate(gs.data<float>(), dx.data<float>(), rows, h, t, d, c, s, -1.f);
                            return std::vector<Tensor>{dx.to(dt)};
                          });
}

}  // namespace booster
