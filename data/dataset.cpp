// ImageFolder and BeansDataset (see dataset.h).
#include "data/dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <filesystem>

#include "data/transforms.h"

namespace booster::data {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, int64_t>> stratified_subset(const std::vector<std::pair<std::string, int64_t>>& samples,
                                                              size_t classes, size_t limit) {
  std::vector<std::vector<size_t>> of(classes);
  for (size_t i = 0; i < samples.size(); ++i) of[size_t(samples[i].second)].push_back(i);
  // One image a class first, then the rest in proportion to the classes' sizes (largest remainder).
  std::vector<size_t> keep(classes, 0);
  size_t present = 0;
  for (size_t c = 0; c < classes; ++c) present += !of[c].empty();
  const size_t extra = limit - std::min(limit, present);
  std::vector<std::pair<double, size_t>> rest;
  size_t given = 0;
  for (size_t c = 0; c < classes; ++c) {
    if (of[c].empty()) continue;
    const double share = double(extra) * double(of[c].size()) / double(samples.size());
    keep[c] = 1 + std::min(size_t(share), of[c].size() - 1);
    given += keep[c];
    rest.emplace_back(share - std::floor(share), c);
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < limit && k < rest.size(); ++k)
    if (keep[rest[k].second] < of[rest[k].second].size()) ++keep[rest[k].second], ++given;
  std::vector<std::pair<std::string, int64_t>> kept;
  for (size_t c = 0; c < classes; ++c)
    for (size_t j = 0; j < keep[c]; ++j) kept.push_back(samples[of[c][j * of[c].size() / keep[c]]]);  // evenly spread
  return kept;
}

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions opts) : root_(root), opts_(std::move(opts)) {
  const char* layout = "expected root/<class name>/<image files>, e.g. beans/train/healthy/healthy_train.0.jpg";
  BOOSTER_CHECK_T(IOError, fs::is_directory(root), "dataset folder '", root, "' does not exist or is not a folder (",
                  layout, ")");
  for (auto& e : fs::directory_iterator(root))
    if (e.is_directory()) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  BOOSTER_CHECK_T(IOError, !classes_.empty(), "dataset folder '", root, "' has no class subfolders (", layout, ")");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    for (auto& e : fs::directory_iterator(fs::path(root) / classes_[c]))
      if (e.is_regular_file()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    const size_t before = samples_.size();
    for (auto& f : files) {
      if (sniff_format(f) == ImageFormat::unknown) {
        spdlog::warn("skipping '{}': not a JPEG or PNG image", f);
        ++skipped_non_images_;
        continue;
      }
      samples_.emplace_back(f, int64_t(c));
    }
    // A class without images would become a label nothing teaches (torchvision's
    // ImageFolder refuses it too: "Found no valid file for the classes ...").
    BOOSTER_CHECK_T(IOError, samples_.size() > before, "class folder '", (fs::path(root) / classes_[c]).string(),
                    "' has no JPEG or PNG images; remove it or add its images (", layout, ")");
  }
  if (opts_.limit > 0 && opts_.limit < samples_.size()) {  // before verification: decode only what is kept
    BOOSTER_CHECK(opts_.limit >= classes_.size(), "dataset folder '", root, "': limit ", opts_.limit, " is below its ",
                  classes_.size(), " classes; a limit keeps at least one image of every class");
    samples_ = stratified_subset(samples_, classes_.size(), opts_.limit);
  }
  if (opts_.verify) {
    // Decode everything once (in parallel); keep what fits in the cache, drop the corrupt.
    std::vector<std::string> errors(samples_.size());
    std::vector<std::shared_ptr<const Image>> decoded(samples_.size());
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = 0; i < samples_.size(); ++i) {
      try {
        decoded[i] = std::make_shared<const Image>(decode_image(samples_[i].first, opts_.max_image_pixels));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
    std::vector<std::pair<std::string, int64_t>> kept;
    for (size_t i = 0; i < samples_.size(); ++i) {
      if (!errors[i].empty()) {
        BOOSTER_CHECK_T(ImageError, !opts_.strict, errors[i]);
        spdlog::warn("skipping {}", errors[i]);
        ++skipped_corrupt_;
        continue;
      }
      const size_t idx = kept.size();
      kept.push_back(samples_[i]);
      if (cache_used_ + decoded[i]->bytes() <= opts_.cache_bytes) {
        cache_used_ += decoded[i]->bytes();
        cache_[idx] = decoded[i];
      }
    }
    samples_ = std::move(kept);
  }
  BOOSTER_CHECK_T(IOError, !samples_.empty(), "dataset folder '", root, "' holds no readable images (", layout, ")");
  if (opts_.verify) {  // a class whose images were all unreadable is a label without images too
    std::vector<size_t> per_class(classes_.size(), 0);
    for (auto& [f, c] : samples_) ++per_class[size_t(c)];
    for (size_t c = 0; c < classes_.size(); ++c)
      BOOSTER_CHECK_T(IOError, per_class[c] > 0, "class folder '", (fs::path(root) / classes_[c]).string(),
                      "' has no readable images: ", skipped_corrupt_, " unreadable image(s) were skipped (see the warnings above)",
                      opts_.limit > 0 ? ", among the " + std::to_string(samples_.size() + skipped_corrupt_) +
                                            " the limit kept; a larger data.limit may keep readable ones"
                                      : std::string());
  }
  if (!opts_.transform) {
    ViTImageProcessor p;
    opts_.transform = eval_transform(p);
  }
}

std::shared_ptr<const Image> ImageFolder::load(size_t index) const {
  BOOSTER_CHECK(index < samples_.size(), "ImageFolder: index ", index, " out of range (", samples_.size(), " samples)");
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(index);
    if (it != cache_.end()) return it->second;
  }
  auto img = std::make_shared<const Image>(decode_image(samples_[index].first, opts_.max_image_pixels));
  std::lock_guard lock(cache_mu_);
  if (!cache_.count(index) && cache_used_ + img->bytes() <= opts_.cache_bytes) {
    cache_used_ += img->bytes();
    cache_[index] = img;
  }
  return img;
}

size_t ImageFolder::cached_bytes() const {
  std::lock_guard lock(cache_mu_);
  return cache_used_;
}

Example ImageFolder::get(size_t index, Generator& g) const {
  auto img = load(index);
  return image_example(opts_.transform(*img, g), samples_[index].second);
}

Example image_example(Tensor pixel_values, int64_t label) {
  return {{"pixel_values", std::move(pixel_values)}, {"labels", Tensor::from_ints({label}, {})}};
}

int64_t example_label(const Example& e) {
  auto it = e.find("labels");
  BOOSTER_CHECK(it != e.end() && it->second.defined() && is_index(it->second.dtype()) && it->second.numel() == 1,
                "example_label: the sample has no class under 'labels' (a one-element i64 or i32 tensor); it has {",
                describe_keys(e), "}");
  return it->second.to_int_vector()[0];
}

ImageTransform train_transform(const ViTImageProcessor& processor, double crop_scale_min) {
  BOOSTER_CHECK(crop_scale_min > 0 && crop_scale_min <= 1, "crop_scale_min must be in (0, 1], got ", crop_scale_min);
  RandomResizedCrop crop;
  crop.scale = {crop_scale_min, 1.0};
  crop.height = processor.height;
  crop.width = processor.width;
  crop.resample = processor.resample;
  return [crop, processor](const Image& img, Generator& g) {
    Image out = RandomHorizontalFlip{}(crop(img, g), g);
    Tensor t = Tensor::empty({3, out.height, out.width});
    processor.to_tensor(out, t.data<float>());
    return t;
  };
}

ImageTransform eval_transform(const ViTImageProcessor& processor) {
  return [processor](const Image& img, Generator&) { return processor(img); };
}

std::string BeansDataset::default_root() { return BOOSTER_SHARED_DIR "/data/beans"; }

BeansDataset::BeansDataset(const std::string& root, const std::string& split, const ViTImageProcessor& processor,
                           bool augment, int tp_size, ImageFolderOptions opts, double crop_scale_min)
    : ImageFolder((fs::path(root) / split).string(), [&] {
        opts.transform = augment ? train_transform(processor, crop_scale_min) : eval_transform(processor);
        return opts;
      }()) {
  BOOSTER_CHECK(tp_size >= 1, "BeansDataset: tp_size must be >= 1");
  label_names_ = classes();
  for (int i = 0; label_names_.size() % size_t(tp_size) != 0; ++i) label_names_.push_back("pad_label_" + std::to_string(i));
}

std::map<int64_t, std::string> BeansDataset::id2label() const {
  std::map<int64_t, std::string> m;
  for (size_t i = 0; i < label_names_.size(); ++i) m[int64_t(i)] = label_names_[i];
  return m;
}

std::map<std::string, int64_t> BeansDataset::label2id() const {
  std::map<std::string, int64_t> m;
  for (size_t i = 0; i < label_names_.size(); ++i) m[label_names_[i]] = int64_t(i);
  return m;
}

}  // namespace booster::data
