// Format sniffing and file reading for the decoders.
#include "data/image.h"

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

Image decode_image(const std::string& path) {
  switch (sniff_format(path)) {
    case ImageFormat::jpeg: return decode_jpeg(read_bytes(path), path);
    case ImageFormat::png: return decode_png(read_bytes(path), path);
    case ImageFormat::unknown: break;
  }
  BOOSTER_THROW(ImageError, "'", path, "' is not a JPEG or PNG image");
}

}  // namespace booster::data
