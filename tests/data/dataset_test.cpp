// ImageFolder / BeansDataset on the real beans folders and on a folder of broken files.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"

using namespace booster;
using namespace booster::data;
namespace fs = std::filesystem;

TEST(Beans, LabelOrderAndCounts) {
  ViTImageProcessor proc;
  ImageFolderOptions o;
  o.verify = false;
  BeansDataset train(BeansDataset::default_root(), "train", proc, false, 1, o);
  EXPECT_EQ(train.label_names(), (std::vector<std::string>{"angular_leaf_spot", "bean_rust", "healthy"}));
  EXPECT_EQ(train.size(), 929u);
  std::vector<int> counts(3);
  for (auto& [p, l] : train.samples()) ++counts[size_t(l)];
  EXPECT_EQ(counts, (std::vector<int>{310, 313, 306}));
  EXPECT_EQ(train.label2id().at("healthy"), 2);
  EXPECT_EQ(train.id2label().at(1), "bean_rust");
  BeansDataset val(BeansDataset::default_root(), "validation", proc, false, 1, o);
  EXPECT_EQ(val.size(), 105u);
  Generator g(0);
  Example e = val.get(0, g);
  EXPECT_EQ(e.at("pixel_values").shape(), (Shape{3, 224, 224}));
  EXPECT_EQ(example_label(e), 0);
  // Colossal-AI pads label names to a multiple of tp_size.
  BeansDataset padded(BeansDataset::default_root(), "validation", proc, false, 2, o);
  EXPECT_EQ(padded.num_labels(), 4);
  EXPECT_EQ(padded.label_names()[3], "pad_label_0");
}

TEST(Beans, LimitKeepsAnEvenSpreadBeforeDecoding) {
  ImageFolderOptions o;
  o.limit = 30;
  BeansDataset train(BeansDataset::default_root(), "train", ViTImageProcessor{}, false, 1, o);
  EXPECT_EQ(train.size(), 30u);
  std::vector<int> counts(3);
  for (auto& [p, l] : train.samples()) ++counts[size_t(l)];
  for (int c : counts) EXPECT_GE(c, 9) << "every class is represented";
  EXPECT_EQ(train.cached_bytes(), size_t(30 * 500 * 500 * 3));  // only the kept images were decoded
}

TEST(Beans, MissingSplitSaysWhatLayoutIsExpected) {
  try {
    BeansDataset(BeansDataset::default_root(), "test", ViTImageProcessor{});
    FAIL();
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("beans/test"), std::string::npos) << msg;
    EXPECT_NE(msg.find("root/<class name>/<image files>"), std::string::npos) << msg;
  }
}

class BrokenFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("booster_broken_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "a");
    fs::create_directories(root / "b");
    const std::string good = BOOSTER_SHARED_DIR "/data/beans/validation/healthy/healthy_validation.0.jpg";
    fs::copy_file(good, root / "a" / "good1.jpg");
    fs::copy_file(good, root / "b" / "good2.jpg");
    std::ofstream(root / "a" / "notes.txt") << "not an image";
    std::ofstream(root / "a" / "empty.jpg");  // zero bytes
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(root / "b" / "truncated.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

TEST_F(BrokenFolder, SkipsWithWarningsAndCounts) {
  ImageFolder ds(root.string());
  EXPECT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.skipped_non_images(), 2u);  // notes.txt and the zero-byte file
  EXPECT_EQ(ds.skipped_corrupt(), 1u);     // truncated.jpg
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"a", "b"}));
  EXPECT_GT(ds.cached_bytes(), 0u);
}

TEST_F(BrokenFolder, StrictRefusesNamingTheFile) {
  ImageFolderOptions o;
  o.strict = true;
  try {
    ImageFolder ds(root.string(), o);
    FAIL();
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated.jpg"), std::string::npos) << e.what();
  }
  // Without verification the corrupt file is found when loaded, with its name.
  o.verify = false;
  o.strict = false;
  ImageFolder lazy(root.string(), o);
  EXPECT_EQ(lazy.size(), 3u);
  Generator g(0);
  EXPECT_THROW(lazy.get(2, g), ImageError);
}

TEST_F(BrokenFolder, CacheIsBounded) {
  ImageFolderOptions o;
  o.cache_bytes = 500 * 500 * 3;  // room for one decoded beans image
  ImageFolder ds(root.string(), o);
  EXPECT_EQ(ds.cached_bytes(), size_t(500 * 500 * 3));
  Generator g(0);
  ds.get(1, g);
  EXPECT_EQ(ds.cached_bytes(), size_t(500 * 500 * 3));
}

namespace {
// A copy of a beans JPEG whose frame header (SOF0) claims width x height pixels: 48 KB on
// disk, 10.8 GB once decoded.
std::string jpeg_claiming(int width, int height) {
  std::ifstream in(BOOSTER_SHARED_DIR "/data/beans/validation/healthy/healthy_validation.0.jpg", std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), {});
  for (size_t i = 2; i + 9 < b.size(); ++i)
    if (uint8_t(b[i]) == 0xFF && (uint8_t(b[i + 1]) == 0xC0 || uint8_t(b[i + 1]) == 0xC2)) {
      b[i + 5] = char(height >> 8), b[i + 6] = char(height & 0xFF);
      b[i + 7] = char(width >> 8), b[i + 8] = char(width & 0xFF);
      return b;
    }
  ADD_FAILURE() << "no SOF marker";
  return b;
}
}  // namespace

// A decompression bomb is refused from its header, before anything is allocated (it took
// 54 s and 10.6 GB before), named, skipped with the usual warning and count.
TEST_F(BrokenFolder, DecompressionBombRefusedFromItsHeader) {
  std::ofstream(root / "b" / "bomb.jpg", std::ios::binary) << jpeg_claiming(60000, 60000);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    decode_image((root / "b" / "bomb.jpg").string());
    FAIL() << "the bomb was decoded";
  } catch (const ImageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bomb.jpg"), std::string::npos) << msg;
    EXPECT_NE(msg.find("60000 x 60000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("data.max_image_pixels"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  ImageFolder ds(root.string());
  EXPECT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.skipped_corrupt(), 2u);  // truncated.jpg and bomb.jpg
  // The limit is configurable: a 500 x 500 image under a limit of 200000 pixels is refused,
  // over half of 300000 it decodes (with a warning), and 0 turns the check off.
  const std::string good = (root / "a" / "good1.jpg").string();
  EXPECT_THROW(decode_image(good, 200000), ImageError);
  EXPECT_EQ(decode_image(good, 300000).width, 500);
  EXPECT_EQ(decode_image(good, 0).width, 500);
  ImageFolderOptions o;
  o.max_image_pixels = 200000;
  EXPECT_THROW(ImageFolder(root.string(), o), IOError);  // nothing left to read
}

TEST(ImageDecode, PngBombRefusedFromItsHeader) {
  // A PNG whose IHDR (CRC recomputed) claims 70000 x 70000 pixels.
  std::ifstream in(BOOSTER_SHARED_DIR "/golden/image_processor/healthy_rgba.png", std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(b.substr(12, 4), "IHDR");
  auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) b[at + size_t(k)] = char((v >> (24 - 8 * k)) & 0xFF);
  };
  put32(16, 70000), put32(20, 70000);
  uint32_t crc = 0xFFFFFFFFu;  // CRC-32 of the chunk type and data
  for (size_t i = 12; i < 12 + 4 + 13; ++i) {
    crc ^= uint8_t(b[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  put32(29, crc ^ 0xFFFFFFFFu);
  const fs::path p = fs::temp_directory_path() / ("booster_bomb_" + std::to_string(::getpid()) + ".png");
  std::ofstream(p, std::ios::binary) << b;
  try {
    decode_image(p.string());
    FAIL() << "the PNG bomb was decoded";
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("70000 x 70000"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

// An empty class folder would become a label without images: refused, naming the folder.
TEST_F(BrokenFolder, EmptyClassFolderIsRefused) {
  fs::create_directories(root / "empty_class");
  std::ofstream(root / "empty_class" / "readme.txt") << "nothing";
  try {
    ImageFolder ds(root.string());
    FAIL() << "a class without images was accepted";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("empty_class"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no JPEG or PNG images"), std::string::npos) << e.what();
  }
}

// A class whose every image is unreadable is refused too, naming its folder.
TEST_F(BrokenFolder, ClassWithOnlyUnreadableImagesIsRefused) {
  fs::create_directories(root / "c");
  std::ifstream in(BOOSTER_SHARED_DIR "/data/beans/validation/healthy/healthy_validation.0.jpg", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(root / "c" / "cut.jpg", std::ios::binary) << bytes.substr(0, 100);
  try {
    ImageFolder ds(root.string());
    FAIL() << "a class without readable images was accepted";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find((root / "c").string() + "' has no readable images"), std::string::npos)
        << e.what();
  }
}

TEST(ImageDecode, MissingFileSaysItDoesNotExist) {
  try {
    decode_image("/no/such/leaf.jpg");
    FAIL();
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

// data.limit keeps every class, in proportion, each spread over its files (it used to take
// the first files in class order: 64 of the 105 validation images had no 'healthy' one).
TEST(Beans, LimitKeepsEveryClassInProportion) {
  ImageFolderOptions o;
  o.verify = false;
  o.limit = 64;
  BeansDataset val(BeansDataset::default_root(), "validation", ViTImageProcessor{}, false, 1, o);
  ASSERT_EQ(val.size(), 64u);
  std::vector<int> counts(3);
  for (auto& [p, l] : val.samples()) ++counts[size_t(l)];
  for (int c : counts) EXPECT_TRUE(c == 21 || c == 22) << c;
  std::vector<std::pair<std::string, int64_t>> s;
  for (int i = 0; i < 100; ++i) s.emplace_back("f" + std::to_string(i), i < 97 ? 0 : (i < 99 ? 1 : 2));
  auto kept = stratified_subset(s, 3, 10);
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(kept[8].second, 1);  // the rare classes keep one each
  EXPECT_EQ(kept[9].second, 2);
  EXPECT_EQ(kept[1].first, "f12");  // class 0's 8 spread over its 97 files
  o.limit = 2;
  try {
    BeansDataset tiny(BeansDataset::default_root(), "validation", ViTImageProcessor{}, false, 1, o);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("limit 2 is below its 3 classes"), std::string::npos) << e.what();
  }
}
