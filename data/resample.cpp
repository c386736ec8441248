// Pillow-compatible resampling (see resample.h); mirrors the algorithm of Pillow's
// Resample.c: per-output-pixel coefficient windows, normalized, then quantized.
#include "data/resample.h"

#include <cmath>

namespace booster::data {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double bicubic_filter(double x) {
  const double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double lanczos_filter(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3.0);
  return 0.0;
}

struct Filter {
  double (*fn)(double);
  double support;
};

Filter filter_of(Resample r) {
  switch (r) {
    case Resample::bilinear: return {bilinear_filter, 1.0};
    case Resample::bicubic: return {bicubic_filter, 2.0};
    case Resample::lanczos: return {lanczos_filter, 3.0};
  }
  return {bilinear_filter, 1.0};
}

// Integer coefficient windows for one axis: bounds[2i] = first input pixel, bounds[2i+1] = count.
struct Coeffs {
  int64_t ksize = 0;
  std::vector<int> bounds;
  std::vector<int32_t> k;  // out_size * ksize, fixed point
};

Coeffs precompute(int64_t in_size, double in0, double in1, int64_t out_size, const Filter& f) {
  const double scale = (in1 - in0) / double(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = f.support * filterscale;
  Coeffs c;
  c.ksize = int64_t(std::ceil(support)) * 2 + 1;
  c.bounds.resize(size_t(out_size * 2));
  c.k.assign(size_t(out_size * c.ksize), 0);
  std::vector<double> kk(size_t(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (double(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = int64_t(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = int64_t(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = f.fn((double(x + xmin) - center + 0.5) * ss);
      kk[size_t(x)] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? kk[size_t(x)] / ww : 0.0;
      // Pillow's normalize_coeffs_8bpc: round half away from zero.
      c.k[size_t(xx * c.ksize + x)] = int32_t(v < 0 ? std::trunc(-0.5 + v * (1 << kPrecisionBits))
                                                   : std::trunc(0.5 + v * (1 << kPrecisionBits)));
    }
    c.bounds[size_t(2 * xx)] = int(xmin);
    c.bounds[size_t(2 * xx + 1)] = int(xmax);
  }
  return c;
}

inline uint8_t clip8(int64_t ss) {
  const int64_t v = ss >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

Resample resample_from_code(int code) {
  BOOSTER_CHECK(code == 1 || code == 2 || code == 3, "resample code ", code,
                " is not supported (1 LANCZOS, 2 BILINEAR, 3 BICUBIC)");
  return Resample(code);
}

Image resize(const Image& src, int64_t out_w, int64_t out_h, Resample filter, const Box& box) {
  BOOSTER_CHECK(out_w > 0 && out_h > 0, "resize: output size ", out_w, "x", out_h, " must be positive");
  BOOSTER_CHECK(box.x0 >= 0 && box.y0 >= 0 && box.x1 <= double(src.width) && box.y1 <= double(src.height) &&
                    box.x0 < box.x1 && box.y0 < box.y1,
                "resize: box (", box.x0, ", ", box.y0, ", ", box.x1, ", ", box.y1, ") outside the ", src.width, "x",
                src.height, " image");
  const Filter f = filter_of(filter);
  const Coeffs ch = precompute(src.width, box.x0, box.x1, out_w, f);
  const Coeffs cv = precompute(src.height, box.y0, box.y1, out_h, f);
  // Only the source rows the vertical pass reads go through the horizontal pass.
  const int64_t ybox_first = cv.bounds[0];
  const int64_t ybox_last = cv.bounds[size_t(out_h * 2 - 2)] + cv.bounds[size_t(out_h * 2 - 1)];
  const int64_t rows = ybox_last - ybox_first;
  std::vector<uint8_t> tmp(size_t(rows * out_w * 3));
  const int64_t init = int64_t(1) << (kPrecisionBits - 1);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in = src.row(y + ybox_first);
    uint8_t* out = tmp.data() + y * out_w * 3;
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const int xmin = ch.bounds[size_t(2 * xx)], xmax = ch.bounds[size_t(2 * xx + 1)];
      const int32_t* k = ch.k.data() + xx * ch.ksize;
      int64_t s0 = init, s1 = init, s2 = init;
      for (int x = 0; x < xmax; ++x) {
        const uint8_t* p = in + (x + xmin) * 3;
        s0 += int64_t(p[0]) * k[x];
        s1 += int64_t(p[1]) * k[x];
        s2 += int64_t(p[2]) * k[x];
      }
      out[3 * xx] = clip8(s0), out[3 * xx + 1] = clip8(s1), out[3 * xx + 2] = clip8(s2);
    }
  }
  Image dst;
  dst.width = out_w;
  dst.height = out_h;
  dst.rgb.resize(size_t(out_w * out_h * 3));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    const int ymin = cv.bounds[size_t(2 * yy)] - int(ybox_first), ymax = cv.bounds[size_t(2 * yy + 1)];
    const int32_t* k = cv.k.data() + yy * cv.ksize;
    uint8_t* out = dst.rgb.data() + yy * out_w * 3;
    for (int64_t xx = 0; xx < out_w * 3; ++xx) {
      int64_t s = init;
      for (int y = 0; y < ymax; ++y) s += int64_t(tmp[size_t((y + ymin) * out_w * 3 + xx)]) * k[y];
      out[xx] = clip8(s);
    }
  }
  return dst;
}

Image resize(const Image& src, int64_t out_w, int64_t out_h, Resample filter) {
  return resize(src, out_w, out_h, filter, Box{0, 0, double(src.width), double(src.height)});
}

Image flip_horizontal(const Image& src) {
  Image dst = src;
  for (int64_t y = 0; y < src.height; ++y) {
    const uint8_t* in = src.row(y);
    uint8_t* out = dst.rgb.data() + y * src.width * 3;
    for (int64_t x = 0; x < src.width; ++x)
      for (int c = 0; c < 3; ++c) out[3 * x + c] = in[3 * (src.width - 1 - x) + c];
  }
  return dst;
}

}  // namespace booster::data
