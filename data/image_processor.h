// ViTImageProcessor with Hugging Face's options and defaults: resize (PIL bilinear with
// antialiasing), rescale by 1/255, normalize, channels first. Reads
// preprocessor_config.json from a model folder.
#pragma once

#include <array>
#include <string>

#include "core/tensor/tensor.h"
#include "data/resample.h"

namespace booster::data {

class ViTImageProcessor {
 public:
  bool do_resize = true;
  int64_t height = 224, width = 224;
  Resample resample = Resample::bilinear;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5};
  std::array<double, 3> image_std{0.5, 0.5, 0.5};

  /// Reads preprocessor_config.json (unknown keys ignored, as HF does; wrong types are errors).
  static ViTImageProcessor from_json_file(const std::string& path);
  /// The processor of a model folder: its preprocessor_config.json, or the defaults.
  static ViTImageProcessor from_pretrained(const std::string& dir);

  /// preprocessor_config.json text with Hugging Face's keys.
  std::string to_json_string() const;

  /// image -> [3, H, W] f32 (resized when do_resize).
  Tensor operator()(const Image& img) const;
  /// Rescales and normalizes an already-sized image into out ([3, H, W] f32, contiguous).
  void to_tensor(const Image& img, float* out) const;
};

}  // namespace booster::data
