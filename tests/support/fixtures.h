// Small helpers the test suites share: the tiny ViT most tests train, a per-process temp
// path, and the message of the error a call raises.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/common/check.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor.h"
#include "nn/vit_config.h"

namespace booster::testkit {

/// A ViT small enough for unit tests: hidden 16, `layers` layers of 2 heads, MLP 32, 8 px
/// images in patches of 4, 3 labels.
inline nn::ViTConfig tiny_vit(int64_t layers = 1) {
  nn::ViTConfig c;
  c.hidden_size = 16, c.num_hidden_layers = layers, c.num_attention_heads = 2, c.intermediate_size = 32;
  c.image_size = 8, c.patch_size = 4, c.num_labels = 3;
  return c;
}

/// `rows` 3 x size x size images of normal noise from `seed`, labels i mod 3 (tiny_vit's).
inline std::pair<Tensor, Tensor> image_batch(int64_t rows, uint64_t seed, int64_t size = 8) {
  Tensor x = Tensor::empty({rows, 3, size, size});
  Generator(seed).normal_(x);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < rows; ++i) y.push_back(i % 3);
  return {x, Tensor::from_ints(y, {rows})};
}

/// A path under the temp folder unique to this process (removed first when it exists).
inline std::filesystem::path temp_path(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() / ("booster_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

/// The largest |a - b| over the elements of two tensors of one shape (compared as f32).
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to(DType::f32).to_vector(), y = b.to(DType::f32).to_vector();
  BOOSTER_CHECK_T(ShapeError, x.size() == y.size(), "max_abs_diff: ", x.size(), " and ", y.size(), " elements");
  float d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

/// The message of the booster error f raises, or "" when it raises none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace booster::testkit
