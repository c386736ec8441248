// JPEG decoding through libjpeg-turbo with PIL's settings (islow DCT, fancy upsampling),
// so pixels match what Hugging Face's processor sees. Warnings such as "premature end of
// data" (a truncated file) are errors, not gray padding.
#include <csetjmp>
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>  // needs size_t and FILE declared first

#include "data/image.h"

namespace booster::data {

namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_error(cinfo);  // a warning: corrupt or truncated data
}

}  // namespace

Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name, int64_t max_pixels) {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  Image img;
  std::vector<uint8_t> row;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    BOOSTER_THROW(ImageError, "corrupt or truncated JPEG '", name, "': ", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  try {  // the header's size, before anything is allocated
    check_image_size(int64_t(cinfo.image_width), int64_t(cinfo.image_height), max_pixels, name);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  const bool adobe_inverted = cmyk && cinfo.saw_Adobe_marker;
  if (cmyk) cinfo.out_color_space = JCS_CMYK;
  else if (cinfo.jpeg_color_space != JCS_GRAYSCALE) cinfo.out_color_space = JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  img.width = cinfo.output_width;
  img.height = cinfo.output_height;
  const int comps = cinfo.output_components;
  img.rgb.resize(size_t(img.width * img.height * 3));
  row.resize(size_t(img.width * comps));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rp = row.data();
    const auto y = cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &rp, 1);
    uint8_t* out = img.rgb.data() + int64_t(y) * img.width * 3;
    for (int64_t x = 0; x < img.width; ++x) {
      if (comps == 1) {  // L -> RGB replicates
        out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = row[size_t(x)];
      } else if (comps == 3) {
        out[3 * x] = row[size_t(3 * x)], out[3 * x + 1] = row[size_t(3 * x + 1)], out[3 * x + 2] = row[size_t(3 * x + 2)];
      } else {  // CMYK -> RGB as PIL: nk = 255 - k; c' = nk - c * nk / 255 (Adobe files store inverted values)
        int c[4];
        for (int i = 0; i < 4; ++i) c[i] = adobe_inverted ? 255 - row[size_t(4 * x + i)] : row[size_t(4 * x + i)];
        const int nk = 255 - c[3];
        for (int i = 0; i < 3; ++i) {
          const int tmp = c[i] * nk + 128;
          const int v = nk - ((tmp + (tmp >> 8)) >> 8);
          out[3 * x + i] = uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

}  // namespace booster::data
