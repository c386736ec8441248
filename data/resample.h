// Image resampling as Pillow does it for 8-bit images (Image.resize with a box): separable
// filters whose support widens by the scale when shrinking (antialiasing), fixed-point
// coefficients with 22 fraction bits, horizontal pass then vertical, each rounded and
// clipped to 8 bits. Bilinear, bicubic (a = -0.5) and Lanczos-3 filters.
#pragma once

#include "data/image.h"

namespace booster::data {

/// PIL resample codes: 1 LANCZOS, 2 BILINEAR, 3 BICUBIC.
enum class Resample { lanczos = 1, bilinear = 2, bicubic = 3 };

/// Region of the source in pixel coordinates (x0, y0) to (x1, y1), floats as PIL allows.
struct Box {
  double x0, y0, x1, y1;
};

/// Resizes the `box` region of src to out_w x out_h.
Image resize(const Image& src, int64_t out_w, int64_t out_h, Resample filter, const Box& box);
/// Resizes the whole image.
Image resize(const Image& src, int64_t out_w, int64_t out_h, Resample filter = Resample::bilinear);
/// Mirrors the image left to right.
Image flip_horizontal(const Image& src);
/// Resample from a PIL code; ValueError for codes not supported.
Resample resample_from_code(int code);

}  // namespace booster::data
