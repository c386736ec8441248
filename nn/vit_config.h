// ViTConfig: Hugging Face's ViT configuration (same keys and defaults), read from and
// written to config.json, plus named presets.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace booster::nn {

/// Hugging Face ViTConfig.
struct ViTConfig {
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.0;
  double attention_probs_dropout_prob = 0.0;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t image_size = 224;
  int64_t patch_size = 16;
  int64_t num_channels = 3;
  bool qkv_bias = true;
  int64_t encoder_stride = 16;
  int64_t num_labels = 2;
  std::map<int64_t, std::string> id2label;  // empty: "LABEL_i"
  std::vector<std::string> architectures{"ViTForImageClassification"};
  std::string model_type = "vit";

  /// Number of patches per image.
  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  /// Label name of class i (id2label or "LABEL_i").
  std::string label(int64_t i) const;
  /// Sets num_labels and id2label from names.
  void set_labels(const std::vector<std::string>& names);
  /// Throws ValueError when sizes do not fit together.
  void validate() const;

  /// Parses config.json; missing keys take HF defaults; a key of the wrong type is an
  /// error naming the key and file.
  static ViTConfig from_json_file(const std::string& path);
  /// Parses config.json text (`where` names the source in errors).
  static ViTConfig from_json_string(const std::string& text, const std::string& where = "config.json");
  /// Serializes with HF's keys (label2id derived from id2label).
  std::string to_json_string() const;
  /// Writes config.json atomically.
  void save(const std::string& path) const;

  /// Named presets: vit-tiny (192/12/3), vit-small (384/12/6), vit-base (768/12/12),
  /// vit-large (1024/24/16), vit-huge (1280/32/16, patch 14), vit-giant (ViT-g/14: 1408/40/16,
  /// MLP 6144, patch 14), vit-fashion-mnist (64/4/4, MLP 128, 28 x 28 x 1 in patches of 7), and
  /// Hugging Face's names of the same shapes (google/vit-large-patch16-224, ...); throws
  /// listing the names.
  static ViTConfig preset(const std::string& name);
  /// Names accepted by preset().
  static std::vector<std::string> preset_names();
};

}  // namespace booster::nn
