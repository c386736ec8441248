// Format sniffing and file reading for the decoders.
#include "data/image.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include <fstream>
#include <iterator>

namespace booster::data {

namespace {
std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BOOSTER_CHECK_T(ImageError, f.good(), "cannot open image '", path, "'");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
}  // namespace

ImageFormat sniff_format(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char m[8] = {};
  f.read(reinterpret_cast<char*>(m), 8);
  const auto n = f.gcount();
  if (n >= 3 && m[0] == 0xFF && m[1] == 0xD8 && m[2] == 0xFF) return ImageFormat::jpeg;
  if (n >= 8 && m[0] == 0x89 && m[1] == 'P' && m[2] == 'N' && m[3] == 'G' && m[4] == 0x0D && m[5] == 0x0A &&
      m[6] == 0x1A && m[7] == 0x0A)
    return ImageFormat::png;
  return ImageFormat::unknown;
}

void check_image_size(int64_t width, int64_t height, int64_t max_pixels, const std::string& name) {
  const int64_t pixels = width * height;
  if (max_pixels <= 0 || pixels <= max_pixels / 2) return;
  BOOSTER_CHECK_T(ImageError, pixels <= max_pixels, "image '", name, "' is ", width, " x ", height, " = ", pixels,
                  " pixels, over the limit of ", max_pixels, " (a decompression bomb?); refused before decoding. "
                  "Raise the limit (data.max_image_pixels, 0: none) if the image is genuine");
  spdlog::warn("image '{}' is {} x {} = {} pixels, over half the limit of {} (a decompression bomb?)", name, width,
               height, pixels, max_pixels);
}

Image decode_image(const std::string& path, int64_t max_pixels) {
  BOOSTER_CHECK_T(ImageError, std::filesystem::exists(path), "'", path, "' does not exist");
  switch (sniff_format(path)) {
    case ImageFormat::jpeg: return decode_jpeg(read_bytes(path), path, max_pixels);
    case ImageFormat::png: return decode_png(read_bytes(path), path, max_pixels);
    case ImageFormat::unknown: break;
  }
  BOOSTER_THROW(ImageError, "'", path, "' is not a JPEG or PNG image");
}

}  // namespace booster::data
