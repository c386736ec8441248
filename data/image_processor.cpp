// ViTImageProcessor (see image_processor.h).
#include "data/image_processor.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/common/file_util.h"

namespace booster::data {

ViTImageProcessor ViTImageProcessor::from_json_file(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    BOOSTER_THROW(IOError, path, ": not valid JSON: ", e.what());
  }
  ViTImageProcessor p;
  try {
    if (j.contains("do_resize")) p.do_resize = j["do_resize"].get<bool>();
    if (j.contains("size")) {
      const auto& s = j["size"];
      if (s.is_number_integer()) p.height = p.width = s.get<int64_t>();
      else p.height = s.at("height").get<int64_t>(), p.width = s.at("width").get<int64_t>();
    }
    if (j.contains("resample")) p.resample = resample_from_code(j["resample"].get<int>());
    if (j.contains("do_rescale")) p.do_rescale = j["do_rescale"].get<bool>();
    if (j.contains("rescale_factor")) p.rescale_factor = j["rescale_factor"].get<double>();
    if (j.contains("do_normalize")) p.do_normalize = j["do_normalize"].get<bool>();
    if (j.contains("image_mean")) p.image_mean = j["image_mean"].get<std::array<double, 3>>();
    if (j.contains("image_std")) p.image_std = j["image_std"].get<std::array<double, 3>>();
  } catch (const nlohmann::json::exception& e) {
    BOOSTER_THROW(ValueError, path, ": ", e.what());
  }
  BOOSTER_CHECK(p.height > 0 && p.width > 0, path, ": size must be positive");
  return p;
}

ViTImageProcessor ViTImageProcessor::from_pretrained(const std::string& dir) {
  const auto f = std::filesystem::path(dir) / "preprocessor_config.json";
  return std::filesystem::exists(f) ? from_json_file(f.string()) : ViTImageProcessor{};
}

std::string ViTImageProcessor::to_json_string() const {
  nlohmann::json j{{"do_resize", do_resize},
                   {"size", {{"height", height}, {"width", width}}},
                   {"resample", int(resample)},
                   {"do_rescale", do_rescale},
                   {"rescale_factor", rescale_factor},
                   {"do_normalize", do_normalize},
                   {"image_mean", image_mean},
                   {"image_std", image_std},
                   {"image_processor_type", "ViTImageProcessor"}};
  return j.dump(2);
}

void ViTImageProcessor::to_tensor(const Image& img, float* out) const {
  const int64_t hw = img.height * img.width;
  for (int c = 0; c < 3; ++c) {
    const float scale = float(do_rescale ? rescale_factor : 1.0);
    const float mean = float(do_normalize ? image_mean[size_t(c)] : 0.0);
    const float inv_std = float(do_normalize ? 1.0 / image_std[size_t(c)] : 1.0);
    float* o = out + c * hw;
    for (int64_t i = 0; i < hw; ++i) o[i] = (float(img.rgb[size_t(3 * i + c)]) * scale - mean) * inv_std;
  }
}

Tensor ViTImageProcessor::operator()(const Image& img) const {
  const Image sized = do_resize && (img.height != height || img.width != width) ? resize(img, width, height, resample) : img;
  Tensor t = Tensor::empty({3, sized.height, sized.width});
  to_tensor(sized, t.data<float>());
  return t;
}

}  // namespace booster::data
