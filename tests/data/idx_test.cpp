// IDX files and FashionMNIST: the real files when installed, and every kind of bad file
// (truncated, foreign, hostile dimensions, a corrupt gzip stream, extra data, image and
// label counts that differ, labels out of range) refused with an error naming the file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/idx.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::data;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> header(uint8_t type, std::vector<uint32_t> dims) {
  std::vector<uint8_t> h{0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) h.insert(h.end(), {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)});
  return h;
}

void write(const fs::path& p, const std::vector<uint8_t>& bytes, bool gzip) {
  if (!gzip) {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return;
  }
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

// A Fashion-MNIST folder of n images of h x w: pixel (i, k) = (i + k) mod 256, label i mod 10.
fs::path tiny_set(const std::string& tag, uint32_t n, uint32_t labels_n, uint32_t h = 4, uint32_t w = 3) {
  fs::path dir = testkit::temp_path(tag);
  fs::create_directories(dir);
  auto img = header(0x08, {n, h, w}), lab = header(0x08, {labels_n});
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t k = 0; k < h * w; ++k) img.push_back(uint8_t((i + k) % 256));
  for (uint32_t i = 0; i < labels_n; ++i) lab.push_back(uint8_t(i % 10));
  write(dir / "train-images-idx3-ubyte.gz", img, true);
  write(dir / "train-labels-idx1-ubyte.gz", lab, true);
  return dir;
}

std::string error_reading(const fs::path& p, int ndim = 0) {
  return testkit::error_of([&] { read_idx(p.string(), ndim); });
}

}  // namespace

TEST(Idx, ReadsGzipAndPlainFiles) {
  fs::path dir = tiny_set("idx_ok", 5, 5);
  FashionMNIST ds(dir.string(), true);
  ASSERT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds.height(), 4);
  EXPECT_EQ(ds.width(), 3);
  Generator g(1);
  auto ex = ds.get(2, g);
  EXPECT_EQ(example_label(ex), 2);
  EXPECT_EQ(ex.at("pixel_values").shape(), (Shape{1, 4, 3}));
  EXPECT_FLOAT_EQ(ex.at("pixel_values").to_vector()[5], float(2 + 5) / 255.0f);
  // The same bytes uncompressed read the same.
  auto plain = header(0x08, {3});
  plain.insert(plain.end(), {7, 8, 9});
  write(dir / "plain", plain, false);
  EXPECT_EQ(read_idx((dir / "plain").string(), 1).data, (std::vector<uint8_t>{7, 8, 9}));
  fs::remove_all(dir);
}

TEST(Idx, BadFilesAreRefusedByName) {
  fs::path dir = testkit::temp_path("idx_bad");
  fs::create_directories(dir);
  auto expect = [&](const std::string& name, const std::vector<uint8_t>& bytes, bool gz, const std::string& what) {
    write(dir / name, bytes, gz);
    const std::string err = error_reading(dir / name);
    EXPECT_NE(err.find(name), std::string::npos) << name << ": " << err;
    EXPECT_NE(err.find(what), std::string::npos) << name << ": " << err;
  };
  auto truncated = header(0x08, {1000, 28, 28});
  truncated.resize(truncated.size() + 2 * 784);
  expect("truncated.gz", truncated, true, "truncated: its header claims 784000 bytes of data, the file holds 1568");
  std::vector<uint8_t> text{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  expect("foreign.txt", text, false, "is not an IDX file");
  expect("overflow.gz", header(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}), true, "claim more than");
  expect("zero_dim.gz", header(0x08, {10, 0, 28}), true, "dimension 1 is 0");
  expect("floats.gz", header(0x0D, {2}), true, "is not unsigned bytes");
  expect("short_header.gz", {0, 0, 8, 3, 0, 0}, true, "truncated inside its header");
  expect("empty.gz", {}, true, "too short for a header");
  auto extra = header(0x08, {2});
  extra.insert(extra.end(), {1, 2, 3});
  expect("extra.gz", extra, true, "holds more data than its header's 2 bytes");
  // A corrupt gzip stream: the compressed bytes of a valid file with its middle overwritten.
  auto good = header(0x08, {4096});
  for (int i = 0; i < 4096; ++i) good.push_back(uint8_t(i * 7));
  write(dir / "corrupt.gz", good, true);
  std::fstream f(dir / "corrupt.gz", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(20);
  f.write("\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  f.close();
  const std::string err = error_reading(dir / "corrupt.gz");
  EXPECT_NE(err.find("corrupt.gz"), std::string::npos) << err;
  EXPECT_FALSE(err.empty());
  EXPECT_NE(error_reading(dir / "missing.gz").find("cannot open IDX file"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Idx, FashionMNISTChecksImagesAgainstLabels) {
  fs::path dir = tiny_set("idx_mismatch", 5, 4);
  std::string err = testkit::error_of([&] { FashionMNIST(dir.string(), true); });
  EXPECT_NE(err.find("holds 5 images but"), std::string::npos) << err;
  EXPECT_NE(err.find("train-labels-idx1-ubyte.gz' holds 4 labels"), std::string::npos) << err;
  fs::remove_all(dir);
  dir = tiny_set("idx_label", 3, 3);
  auto lab = header(0x08, {3});
  lab.insert(lab.end(), {1, 12, 3});
  write(dir / "train-labels-idx1-ubyte.gz", lab, true);
  err = testkit::error_of([&] { FashionMNIST(dir.string(), true); });
  EXPECT_NE(err.find("label 12 of image 1 is not a class 0-9"), std::string::npos) << err;
  err = testkit::error_of([&] { FashionMNIST(dir.string(), false); });
  EXPECT_NE(err.find("t10k-images-idx3-ubyte"), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(Idx, TensorTransformsFollowTorchvision) {
  Tensor img = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  Generator g(3);
  EXPECT_EQ(random_crop(img, 2, 0, g).shape(), (Shape{1, 2, 2}));
  // Padding 1 around 2 x 2, crop 4 x 4: the whole zero-padded image.
  auto padded = random_crop(Tensor::from_vector({1, 2, 3, 4}, {1, 2, 2}), 4, 1, g).to_vector();
  EXPECT_EQ(padded, (std::vector<float>{0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0}));
  EXPECT_EQ(random_horizontal_flip(img, 1.0, g).to_vector(), (std::vector<float>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(random_horizontal_flip(img, 0.0, g).to_vector(), img.to_vector());
  auto n = normalize(img, {1.0}, {2.0}).to_vector();
  EXPECT_FLOAT_EQ(n[3], 1.5f);
}

// The Debian package's files: 60,000 and 10,000 images of 28 x 28, ten classes.
TEST(Idx, TheRealFashionMNIST) {
  if (!fs::exists(FashionMNIST::default_root())) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMNIST train(FashionMNIST::default_root(), true), test(FashionMNIST::default_root(), false);
  EXPECT_EQ(train.size(), 60000u);
  EXPECT_EQ(test.size(), 10000u);
  EXPECT_EQ(train.height(), 28);
  Generator g(0);
  EXPECT_EQ(example_label(train.get(0, g)), 9);  // the first training image is an ankle boot
  EXPECT_EQ(example_label(test.get(0, g)), 9);
}
