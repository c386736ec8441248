// PNG decoding through libpng: palette and low-bit gray expanded, 16-bit scaled to 8,
// gray replicated to RGB and alpha dropped without compositing, as PIL's convert("RGB").
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "data/image.h"

namespace booster::data {

namespace {
struct Reader {
  const std::vector<uint8_t>* bytes;
  size_t pos = 0;
};

void read_fn(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (r->pos + n > r->bytes->size()) png_error(png, "unexpected end of file (truncated PNG)");
  std::memcpy(out, r->bytes->data() + r->pos, n);
  r->pos += n;
}

void error_fn(png_structp png, png_const_charp msg) {
  auto* buf = static_cast<char*>(png_get_error_ptr(png));
  std::strncpy(buf, msg, 255);
  png_longjmp(png, 1);
}

void warn_fn(png_structp, png_const_charp) {}
}  // namespace

Image decode_png(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  char message[256] = "unknown error";
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, message, error_fn, warn_fn);
  BOOSTER_CHECK_T(ImageError, png != nullptr, "libpng: cannot create a reader for '", name, "'");
  png_infop info = png_create_info_struct(png);
  Reader reader{&bytes};
  Image img;
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    BOOSTER_THROW(ImageError, "corrupt or truncated PNG '", name, "': ", message);
  }
  png_set_read_fn(png, &reader, read_fn);
  png_read_info(png, info);
  try {  // the header's size, before anything is allocated
    check_image_size(int64_t(png_get_image_width(png, info)), int64_t(png_get_image_height(png, info)), max_pixels, name);
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  img.width = png_get_image_width(png, info);
  img.height = png_get_image_height(png, info);
  BOOSTER_CHECK_T(ImageError, png_get_channels(png, info) == 3, "PNG '", name, "': unexpected channel layout");
  img.rgb.resize(size_t(img.width * img.height * 3));
  rows.resize(size_t(img.height));
  for (int64_t y = 0; y < img.height; ++y) rows[size_t(y)] = img.rgb.data() + y * img.width * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return img;
}

}  // namespace booster::data
