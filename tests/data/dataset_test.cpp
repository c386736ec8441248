// ImageFolder / BeansDataset on the real beans folders and on a folder of broken files.
#include <gtest/gtest.h>

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
  EXPECT_EQ(e.pixel_values.shape(), (Shape{3, 224, 224}));
  EXPECT_EQ(e.label, 0);
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
