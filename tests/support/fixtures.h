// Small helpers the test suites share: the tiny ViT most tests train, a per-process temp
// path, and the message of the error a call raises.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/common/check.h"
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

/// A path under the temp folder unique to this process (removed first when it exists).
inline std::filesystem::path temp_path(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() / ("booster_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
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
