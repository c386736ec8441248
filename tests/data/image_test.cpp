// Decoding, PIL-faithful resizing and the HF processor against the golden preprocessing.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "data/image_processor.h"
#include "data/transforms.h"
#include "nn/safetensors.h"

using namespace booster;
using namespace booster::data;

namespace {
const std::string kGolden = BOOSTER_SHARED_DIR "/golden/image_processor";
}

TEST(ImageProcessor, MatchesHuggingFaceGolden) {
  auto proc = ViTImageProcessor::from_json_file(kGolden + "/preprocessor_config.json");
  EXPECT_EQ(proc.height, 224);
  EXPECT_EQ(proc.resample, Resample::bilinear);
  Tensor expected = nn::load_safetensors(kGolden + "/expected.safetensors").at("pixel_values");
  std::ifstream list(kGolden + "/images.txt");
  int64_t i = 0;
  for (std::string name; std::getline(list, name); ++i) {
    if (name.empty()) continue;
    Tensor got = proc(decode_image(kGolden + "/" + name));
    auto g = got.to_vector(), e = expected.select(0, i).contiguous().to_vector();
    ASSERT_EQ(g.size(), e.size()) << name;
    double sum = 0, worst = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      const double d = std::abs(double(g[k]) - e[k]);
      sum += d;
      worst = std::max(worst, d);
    }
    const double mean = sum / double(g.size());
    std::printf("  %-18s mean |diff| %.5f  max %.5f\n", name.c_str(), mean, worst);
    EXPECT_LE(mean, 0.01) << name;
    EXPECT_LE(worst, 0.1) << name;
  }
  EXPECT_EQ(i, 4);
}

TEST(ImageDecode, GrayAndAlphaBecomeRgb) {
  Image gray = decode_image(kGolden + "/healthy_gray.jpg");
  for (int64_t p = 0; p < 100; ++p) {  // L -> RGB replicates the channel
    EXPECT_EQ(gray.rgb[size_t(3 * p)], gray.rgb[size_t(3 * p + 1)]);
    EXPECT_EQ(gray.rgb[size_t(3 * p)], gray.rgb[size_t(3 * p + 2)]);
  }
  Image rgba = decode_image(kGolden + "/healthy_rgba.png");
  EXPECT_EQ(rgba.rgb.size(), size_t(rgba.width * rgba.height * 3));
  EXPECT_THROW(decode_image(kGolden + "/images.txt"), ImageError);
}

TEST(Resample, IdentityAndConstantImages) {
  Image img;
  img.width = 5, img.height = 4;
  img.rgb.resize(60);
  for (size_t i = 0; i < 60; ++i) img.rgb[i] = uint8_t(i * 4);
  Image same = resize(img, 5, 4);
  EXPECT_EQ(same.rgb, img.rgb);
  Image flat;
  flat.width = 50, flat.height = 30;
  flat.rgb.assign(50 * 30 * 3, 77);
  for (auto r : {Resample::bilinear, Resample::bicubic, Resample::lanczos}) {
    Image s = resize(flat, 17, 9, r);
    for (uint8_t v : s.rgb) ASSERT_EQ(v, 77);  // normalized filters keep a constant
  }
  EXPECT_THROW(resize(flat, 10, 10, Resample::bilinear, Box{0, 0, 60, 30}), ValueError);
}

TEST(Transforms, CropFlipMixup) {
  Image img;
  img.width = 40, img.height = 30;
  img.rgb.resize(40 * 30 * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t(i % 251);
  RandomResizedCrop crop;
  crop.height = crop.width = 16;
  Generator g(4);
  for (int k = 0; k < 50; ++k) {
    auto [top, left, h, w] = crop.get_params(img, g);
    ASSERT_TRUE(top >= 0 && left >= 0 && top + h <= 30 && left + w <= 40 && h > 0 && w > 0);
    const double area = double(h * w) / 1200.0;
    ASSERT_LE(area, 1.0 + 1e-9);
  }
  EXPECT_EQ(crop(img, g).width, 16);
  Image f = flip_horizontal(img);
  EXPECT_EQ(f.rgb[0], img.rgb[size_t(39 * 3)]);
  EXPECT_EQ(flip_horizontal(f).rgb, img.rgb);

  Mixup mix;
  mix.alpha = 0.4, mix.num_classes = 3;
  Tensor x = Tensor::from_vector({1, 1, 0, 0}, {2, 2, 1, 1});
  auto [mixed, targets, lam] = mix(x, Tensor::from_ints({0, 2}, {2}), g);
  EXPECT_GT(lam, 0.0);
  EXPECT_LT(lam, 1.0);
  auto t = targets.to_vector();
  EXPECT_NEAR(t[0], lam, 1e-6);        // sample 0: lam * onehot(0) + (1 - lam) * onehot(2)
  EXPECT_NEAR(t[2], 1 - lam, 1e-6);
  EXPECT_NEAR(t[0] + t[1] + t[2], 1.0, 1e-6);
  EXPECT_NEAR(mixed.to_vector()[0], lam, 1e-6);
  // Beta(a, a) has mean 1/2.
  double m = 0;
  for (int k = 0; k < 4000; ++k) m += sample_beta(0.8, 0.8, g);
  EXPECT_NEAR(m / 4000, 0.5, 0.02);
}
