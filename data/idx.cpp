// IDX files and FashionMNIST (see idx.h).
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/kernels/ops.h"
#include "data/resample.h"

namespace booster::data {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to n bytes; returns how many (fewer at the end of the data). A zlib error (a
// corrupt stream) is an IOError naming the file.
size_t read_some(gzFile f, uint8_t* out, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    const int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      BOOSTER_THROW(IOError, "IDX file '", path, "': the gzip stream is corrupt after ", got, " bytes (", msg, ")");
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

uint32_t big_endian(const uint8_t* b) { return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3]; }

// The dimensions after the magic number, and the element count they claim (bounded).
std::vector<int64_t> read_dims(gzFile f, const std::string& path, int expect_ndim, uint64_t max_bytes, uint64_t& count) {
  uint8_t magic[4];
  BOOSTER_CHECK_T(IOError, read_some(f, magic, 4, path) == 4, "IDX file '", path, "' is too short for a header");
  BOOSTER_CHECK_T(IOError, magic[0] == 0 && magic[1] == 0, "'", path, "' is not an IDX file (magic number ",
                  int(magic[0]), ", ", int(magic[1]), ", ... does not start with two zero bytes)");
  BOOSTER_CHECK_T(IOError, magic[2] == 0x08, "IDX file '", path, "': element type 0x", std::hex, int(magic[2]),
                  " is not unsigned bytes (0x08)");
  const int ndim = magic[3];
  BOOSTER_CHECK_T(IOError, ndim >= 1 && (expect_ndim == 0 || ndim == expect_ndim), "IDX file '", path, "' has ", ndim,
                  " dimensions, expected ", expect_ndim);
  std::vector<uint8_t> raw(size_t(4 * ndim));
  BOOSTER_CHECK_T(IOError, read_some(f, raw.data(), raw.size(), path) == raw.size(), "IDX file '", path,
                  "' is truncated inside its header (", ndim, " dimensions)");
  std::vector<int64_t> dims;
  count = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint64_t d = big_endian(&raw[size_t(4 * i)]);
    BOOSTER_CHECK_T(IOError, d > 0, "IDX file '", path, "': dimension ", i, " is 0");
    BOOSTER_CHECK_T(IOError, count <= max_bytes / d, "IDX file '", path, "': its dimensions claim more than ",
                    max_bytes, " bytes (dimension ", i, " = ", d, ")");
    count *= d;
    dims.push_back(int64_t(d));
  }
  return dims;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expect_ndim, uint64_t max_bytes) {
  GzFile f(gzopen(path.c_str(), "rb"));
  BOOSTER_CHECK_T(IOError, f != nullptr, "cannot open IDX file '", path, "': ", std::strerror(errno));
  uint64_t count = 0;
  IdxArray a;
  a.dims = read_dims(f.get(), path, expect_ndim, max_bytes, count);
  // Read as it arrives, 1 MB at a time: a short file allocates what it holds, not what it claims.
  constexpr size_t kChunk = size_t(1) << 20;
  while (a.data.size() < count) {
    const size_t want = std::min<uint64_t>(kChunk, count - a.data.size()), at = a.data.size();
    a.data.resize(at + want);
    const size_t got = read_some(f.get(), a.data.data() + at, want, path);
    a.data.resize(at + got);
    BOOSTER_CHECK_T(IOError, got == want, "IDX file '", path, "' is truncated: its header claims ", count,
                    " bytes of data, the file holds ", a.data.size());
  }
  uint8_t extra = 0;
  BOOSTER_CHECK_T(IOError, read_some(f.get(), &extra, 1, path) == 0, "IDX file '", path,
                  "' holds more data than its header's ", count, " bytes (not an IDX file of these dimensions)");
  return a;
}

Tensor random_crop(const Tensor& image, int64_t size, int64_t padding, Generator& g) {
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
  const int64_t ph = h + 2 * padding, pw = w + 2 * padding;
  BOOSTER_CHECK(size <= ph && size <= pw, "random_crop: ", size, " x ", size, " does not fit a padded ", ph, " x ", pw,
                " image");
  const int64_t top = int64_t(g.next_u64() % uint64_t(ph - size + 1)), left = int64_t(g.next_u64() % uint64_t(pw - size + 1));
  Tensor src = image.contiguous(), out = Tensor::zeros({c, size, size});
  const float* s = src.data<float>();
  float* o = out.data<float>();
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < size; ++y) {
      const int64_t sy = top + y - padding;
      if (sy < 0 || sy >= h) continue;
      for (int64_t x = 0; x < size; ++x) {
        const int64_t sx = left + x - padding;
        if (sx >= 0 && sx < w) o[(ch * size + y) * size + x] = s[(ch * h + sy) * w + sx];
      }
    }
  return out;
}

Tensor random_horizontal_flip(const Tensor& image, double p, Generator& g) {
  if (g.next_double() >= p) return image;
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
  Tensor src = image.contiguous(), out = Tensor::empty({c, h, w});
  for (int64_t r = 0; r < c * h; ++r)
    for (int64_t x = 0; x < w; ++x) out.data<float>()[r * w + x] = src.data<float>()[r * w + (w - 1 - x)];
  return out;
}

Tensor normalize(const Tensor& image, const std::vector<double>& mean, const std::vector<double>& std) {
  const int64_t c = image.size(0), hw = image.numel() / c;
  BOOSTER_CHECK(int64_t(mean.size()) == c && int64_t(std.size()) == c, "normalize: ", mean.size(), " means and ",
                std.size(), " stds for ", c, " channels");
  Tensor src = image.contiguous(), out = Tensor::empty(image.shape());
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < hw; ++i)
      out.data<float>()[ch * hw + i] = float((src.data<float>()[ch * hw + i] - mean[size_t(ch)]) / std[size_t(ch)]);
  return out;
}

std::string FashionMNIST::default_root() { return "/usr/share/datasets/fashion-mnist"; }

const std::vector<std::string>& FashionMNIST::classes() {
  static const std::vector<std::string> c = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                             "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return c;
}

Tensor FashionMNIST::from_image(const Image& img, int64_t size) {
  BOOSTER_CHECK(size > 0, "FashionMNIST::from_image: size must be positive, got ", size);
  const Image small = resize(img, size, size, Resample::bilinear);
  Tensor x = Tensor::empty({1, size, size});
  float* p = x.data<float>();
  for (int64_t i = 0; i < size * size; ++i) {
    const uint8_t* px = small.rgb.data() + i * 3;
    const int l = (px[0] * 19595 + px[1] * 38470 + px[2] * 7471 + 0x8000) >> 16;  // PIL's "L", rounded as it does
    p[i] = float(l) / 255.0f;
  }
  Generator unused(0);
  return default_transform(false)(x, unused);
}

TensorTransform FashionMNIST::default_transform(bool augment) {
  return [augment](const Tensor& img, Generator& g) {
    Tensor x = augment ? random_horizontal_flip(random_crop(img, img.size(1), 4, g), 0.5, g) : img;
    return normalize(x, {kMean}, {kStd});
  };
}

namespace {
// <root>/<name>.gz, or <root>/<name> when only the uncompressed file is there.
std::string idx_path(const std::string& root, const std::string& name) {
  const auto gz = std::filesystem::path(root) / (name + ".gz"), plain = std::filesystem::path(root) / name;
  if (std::filesystem::exists(gz) || !std::filesystem::exists(plain)) return gz.string();
  return plain.string();
}
}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train, TensorTransform transform, size_t limit)
    : transform_(std::move(transform)) {
  const std::string split = train ? "train" : "t10k";
  const std::string ip = idx_path(root, split + "-images-idx3-ubyte"), lp = idx_path(root, split + "-labels-idx1-ubyte");
  BOOSTER_CHECK_T(IOError, std::filesystem::exists(ip), "FashionMNIST: no '", ip,
                  "' (apt-get install dataset-fashion-mnist, or give the folder holding the IDX files)");
  IdxArray images = read_idx(ip, 3), labels = read_idx(lp, 1);
  BOOSTER_CHECK_T(IOError, images.dims[0] == labels.dims[0], "FashionMNIST: '", ip, "' holds ", images.dims[0],
                  " images but '", lp, "' holds ", labels.dims[0], " labels");
  for (size_t i = 0; i < labels.data.size(); ++i)
    BOOSTER_CHECK_T(IOError, labels.data[i] < classes().size(), "FashionMNIST: '", lp, "': label ", int(labels.data[i]),
                    " of image ", i, " is not a class 0-", classes().size() - 1);
  h_ = images.dims[1], w_ = images.dims[2];
  size_t n = labels.data.size();
  if (limit > 0 && limit < n) n = limit;  // the first `limit` images
  labels_.assign(labels.data.begin(), labels.data.begin() + std::ptrdiff_t(n));
  images.data.resize(n * size_t(h_ * w_));
  pixels_ = std::move(images.data);
}

Example FashionMNIST::get(size_t index, Generator& g) const {
  BOOSTER_CHECK(index < labels_.size(), "FashionMNIST: index ", index, " of ", labels_.size());
  Tensor img = Tensor::empty({1, h_, w_});
  const uint8_t* p = pixels_.data() + index * size_t(h_ * w_);
  for (int64_t i = 0; i < h_ * w_; ++i) img.data<float>()[i] = float(p[i]) / 255.0f;
  return image_example(transform_ ? transform_(img, g) : img, int64_t(labels_[index]));
}

}  // namespace booster::data
