// Decoded images (8-bit RGB, row-major HWC) and the decoders: JPEG through libjpeg-turbo,
// PNG through libpng. Grayscale, CMYK and alpha images become RGB as PIL's convert("RGB")
// does. Anything malformed is an ImageError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/check.h"

namespace booster::data {

/// A file that is not a readable image.
class ImageError : public IOError {
 public:
  using IOError::IOError;
};

/// 8-bit RGB pixels, row-major, 3 bytes per pixel.
struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;
  size_t bytes() const { return rgb.size(); }
  const uint8_t* row(int64_t y) const { return rgb.data() + y * width * 3; }
};

enum class ImageFormat { unknown, jpeg, png };

/// Pillow's decompression-bomb rule: an image over kMaxImagePixels (2 x Pillow's
/// Image.MAX_IMAGE_PIXELS = 89,478,485) is refused before it is decoded, from the size in
/// its header; one over half of it decodes with a warning. 0 turns the check off.
constexpr int64_t kMaxImagePixels = 178956970;
/// ImageError when width x height is over max_pixels (naming the file, its size and the
/// limit); a warning when over half of it.
void check_image_size(int64_t width, int64_t height, int64_t max_pixels, const std::string& name);

/// The format told by the file's first bytes (not its name).
ImageFormat sniff_format(const std::string& path);
/// Reads and decodes a JPEG or PNG file to RGB; ImageError on anything malformed, truncated,
/// missing, or over max_pixels.
Image decode_image(const std::string& path, int64_t max_pixels = kMaxImagePixels);
/// Decodes JPEG bytes; `name` appears in errors.
Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels = kMaxImagePixels);
/// Decodes PNG bytes; `name` appears in errors.
Image decode_png(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels = kMaxImagePixels);

}  // namespace booster::data
