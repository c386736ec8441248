// Datasets: the interface the DataLoader reads, ImageFolder (class = sorted subfolder,
// files sorted), and BeansDataset in the spirit of Colossal-AI's ViT example. A sample is
// named tensors (Hugging Face's keys: an image dataset gives "pixel_values" [3, H, W] f32
// and "labels", a 0-dim i64 class; a token stream "input_ids" and "labels", i64 or i32). Non-image
// files are skipped with one warning each; corrupt images are skipped with a warning
// naming the file (or refused with `strict`). Decoded images are cached, bounded in bytes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor/random.h"
#include "core/tensor/tensor_map.h"
#include "data/image.h"
#include "data/image_processor.h"

namespace booster::data {

/// One sample: named tensors of any keys and dtypes ({"pixel_values", "labels"} for images).
using Example = TensorMap;
/// An image sample: {"pixel_values": image, "labels": class as a 0-dim i64}.
Example image_example(Tensor pixel_values, int64_t label);
/// The class of an image sample (its 0-dim "labels"), with an error naming what is there.
int64_t example_label(const Example& e);

/// What a DataLoader reads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  /// Sample `index`; `g` drives its augmentation (the loader seeds it per sample and epoch).
  virtual Example get(size_t index, Generator& g) const = 0;
};

/// Image -> tensor, with a generator for random augmentation.
using ImageTransform = std::function<Tensor(const Image&, Generator&)>;

struct ImageFolderOptions {
  bool verify = true;                 // decode every image once up front; corrupt ones are skipped
  size_t limit = 0;                   // keep this many images, every class in proportion, each evenly spread (0: all)
  bool strict = false;                // a corrupt image is an error instead of a warning
  size_t cache_bytes = size_t(2) << 30;  // decoded-image cache bound (0: no cache)
  int64_t max_image_pixels = kMaxImagePixels;  // larger images are refused from their header (0: no limit)
  ImageTransform transform;           // default: ViTImageProcessor()
};

/// root/<class>/<image>, classes sorted by name.
class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(const std::string& root, ImageFolderOptions opts = {});
  size_t size() const override { return samples_.size(); }
  Example get(size_t index, Generator& g) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }
  /// The decoded image of sample i (from the cache when there).
  std::shared_ptr<const Image> load(size_t index) const;
  size_t skipped_non_images() const { return skipped_non_images_; }
  size_t skipped_corrupt() const { return skipped_corrupt_; }
  size_t cached_bytes() const;
  const std::string& root() const { return root_; }
  void set_transform(ImageTransform t) { opts_.transform = std::move(t); }

 private:
  std::string root_;
  ImageFolderOptions opts_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> samples_;
  size_t skipped_non_images_ = 0, skipped_corrupt_ = 0;
  mutable std::mutex cache_mu_;
  mutable std::map<size_t, std::shared_ptr<const Image>> cache_;
  mutable size_t cache_used_ = 0;
};

/// `limit` of `samples` (path, class in [0, classes)): every class keeps at least one, the
/// rest in proportion to the classes' sizes (largest remainder), each class's evenly spread
/// over its sorted files. Needs limit >= the classes that have samples.
std::vector<std::pair<std::string, int64_t>> stratified_subset(const std::vector<std::pair<std::string, int64_t>>& samples,
                                                              size_t classes, size_t limit);

/// The training transform of the beans example: RandomResizedCrop to the processor's size
/// (area fraction in [crop_scale_min, 1]; torchvision's default 0.08), RandomHorizontalFlip,
/// then rescale and normalize.
ImageTransform train_transform(const ViTImageProcessor& processor, double crop_scale_min = 0.08);
/// The evaluation transform: the processor itself.
ImageTransform eval_transform(const ViTImageProcessor& processor);

/// The beans leaf-disease dataset in ImageFolder layout (root/<split>/<class>/<image>).
class BeansDataset : public ImageFolder {
 public:
  /// Default root of the shared data folder.
  static std::string default_root();
  /// `augment` selects the training transform; label names are padded with pad_label_i
  /// to a multiple of tp_size, as Colossal-AI's example does.
  BeansDataset(const std::string& root, const std::string& split, const ViTImageProcessor& processor,
               bool augment = false, int tp_size = 1, ImageFolderOptions opts = {}, double crop_scale_min = 0.08);
  int64_t num_labels() const { return int64_t(label_names_.size()); }
  const std::vector<std::string>& label_names() const { return label_names_; }
  std::map<int64_t, std::string> id2label() const;
  std::map<std::string, int64_t> label2id() const;

 private:
  std::vector<std::string> label_names_;
};

}  // namespace booster::data
