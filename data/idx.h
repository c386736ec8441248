// The IDX format (LeCun's MNIST files, Fashion-MNIST's): a magic number (two zero bytes,
// the element type, the number of dimensions), the dimensions as big-endian uint32, then
// the elements. Files may be gzip-compressed (read through zlib) or plain. FashionMNIST is
// torchvision's dataset of that name over Debian's dataset-fashion-mnist package.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image.h"

namespace booster::data {

/// An IDX file of unsigned bytes (type 0x08): its dimensions and elements.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads `path` (gzip or plain). `expect_ndim` > 0 requires that many dimensions. The data is
/// read as it arrives (a header claiming more than the file holds allocates no more than
/// the file gives), and the claimed size is bounded (max_bytes) before anything is read. A
/// truncated, foreign or hostile file is an IOError naming the file and what is wrong.
IdxArray read_idx(const std::string& path, int expect_ndim = 0, uint64_t max_bytes = uint64_t(1) << 32);

/// A transform of one image tensor [C, H, W] f32 in [0, 1].
using TensorTransform = std::function<Tensor(const Tensor& image, Generator& g)>;

/// torchvision.transforms.RandomCrop(size, padding) (zero fill): pads each side by
/// `padding`, then takes a size x size window at a uniformly drawn offset.
Tensor random_crop(const Tensor& image, int64_t size, int64_t padding, Generator& g);
/// torchvision.transforms.RandomHorizontalFlip(p) on a tensor.
Tensor random_horizontal_flip(const Tensor& image, double p, Generator& g);
/// torchvision.transforms.Normalize: (x - mean[c]) / std[c] per channel.
Tensor normalize(const Tensor& image, const std::vector<double>& mean, const std::vector<double>& std);

/// torchvision.datasets.FashionMNIST(root, train, transform): 60,000 training or 10,000 test
/// images, 28 x 28 grayscale as [1, 28, 28] f32 in [0, 1] (then `transform`), labels 0-9.
class FashionMNIST : public Dataset {
 public:
  /// Debian's dataset-fashion-mnist folder.
  static std::string default_root();
  /// torchvision's classes.
  static const std::vector<std::string>& classes();
  /// The training-set pixel mean and standard deviation (Normalize's usual arguments).
  static constexpr double kMean = 0.2860, kStd = 0.3530;
  /// The usual training transform: RandomCrop(28, padding=4), RandomHorizontalFlip, Normalize;
  /// without augment, Normalize only.
  static TensorTransform default_transform(bool augment);
  /// An image file's pixels as a Fashion-MNIST model takes them (vit_predict on a run's
  /// checkpoint): grayscale as PIL's convert("L") (0.299 R + 0.587 G + 0.114 B, rounded),
  /// resized to size x size (bilinear), in [0, 1], then default_transform(false): [1, size, size].
  static Tensor from_image(const Image& img, int64_t size = 28);

  FashionMNIST(const std::string& root, bool train, TensorTransform transform = nullptr, size_t limit = 0);
  size_t size() const override { return labels_.size(); }
  Example get(size_t index, Generator& g) const override;
  int64_t height() const { return h_; }
  int64_t width() const { return w_; }

 private:
  std::vector<uint8_t> pixels_, labels_;
  int64_t h_ = 0, w_ = 0;
  TensorTransform transform_;
};

}  // namespace booster::data
