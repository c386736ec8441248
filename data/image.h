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

/// The format told by the file's first bytes (not its name).
ImageFormat sniff_format(const std::string& path);
/// Reads and decodes a JPEG or PNG file to RGB; ImageError on anything malformed or truncated.
Image decode_image(const std::string& path);
/// Decodes JPEG bytes; `name` appears in errors.
Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name);
/// Decodes PNG bytes; `name` appears in errors.
Image decode_png(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace booster::data
