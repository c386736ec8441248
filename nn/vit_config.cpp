// ViTConfig JSON reading/writing and presets.
#include "nn/vit_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "nn/json_config.h"

namespace booster::nn {

using nlohmann::json;

std::string ViTConfig::label(int64_t i) const {
  auto it = id2label.find(i);
  return it != id2label.end() ? it->second : "LABEL_" + std::to_string(i);
}

void ViTConfig::set_labels(const std::vector<std::string>& names) {
  num_labels = int64_t(names.size());
  id2label.clear();
  for (size_t i = 0; i < names.size(); ++i) id2label[int64_t(i)] = names[i];
}

void ViTConfig::validate() const {
  BOOSTER_CHECK(hidden_size > 0 && num_attention_heads > 0 && hidden_size % num_attention_heads == 0,
                "ViTConfig: hidden_size ", hidden_size, " must be a positive multiple of num_attention_heads ",
                num_attention_heads);
  BOOSTER_CHECK(patch_size > 0 && image_size % patch_size == 0, "ViTConfig: image_size ", image_size,
                " must be a multiple of patch_size ", patch_size);
  BOOSTER_CHECK(num_hidden_layers >= 0 && intermediate_size > 0 && num_channels > 0 && num_labels >= 0,
                "ViTConfig: layer, channel and label counts must be non-negative");
  BOOSTER_CHECK(hidden_act == "gelu" || hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh",
                "ViTConfig: hidden_act '", hidden_act, "' is not supported (gelu, gelu_new, gelu_pytorch_tanh)");
}


ViTConfig ViTConfig::from_json_string(const std::string& text, const std::string& where) {
  const json j = parse_config_json(text, where);
  ViTConfig c;
  read_config_key(j, "hidden_size", c.hidden_size, where);
  read_config_key(j, "num_hidden_layers", c.num_hidden_layers, where);
  read_config_key(j, "num_attention_heads", c.num_attention_heads, where);
  read_config_key(j, "intermediate_size", c.intermediate_size, where);
  read_config_key(j, "hidden_act", c.hidden_act, where);
  read_config_key(j, "hidden_dropout_prob", c.hidden_dropout_prob, where);
  read_config_key(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, where);
  read_config_key(j, "initializer_range", c.initializer_range, where);
  read_config_key(j, "layer_norm_eps", c.layer_norm_eps, where);
  read_config_key(j, "image_size", c.image_size, where);
  read_config_key(j, "patch_size", c.patch_size, where);
  read_config_key(j, "num_channels", c.num_channels, where);
  read_config_key(j, "qkv_bias", c.qkv_bias, where);
  read_config_key(j, "encoder_stride", c.encoder_stride, where);
  read_config_key(j, "architectures", c.architectures, where);
  read_config_key(j, "model_type", c.model_type, where);
  if (j.contains("id2label") && j["id2label"].is_object()) {
    for (auto& [k, v] : j["id2label"].items()) {
      BOOSTER_CHECK(v.is_string(), where, ": id2label['", k, "'] must be a string");
      try {
        c.id2label[std::stoll(k)] = v.get<std::string>();
      } catch (const std::exception&) {
        BOOSTER_THROW(ValueError, where, ": id2label key '", k, "' is not an integer");
      }
    }
    c.num_labels = int64_t(c.id2label.size());
  }
  read_config_key(j, "num_labels", c.num_labels, where);  // HF: explicit num_labels wins
  c.validate();
  return c;
}

ViTConfig ViTConfig::from_json_file(const std::string& path) { return from_json_string(read_text_file(path), path); }

std::string ViTConfig::to_json_string() const {
  json j;
  j["architectures"] = architectures;
  j["model_type"] = model_type;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["image_size"] = image_size;
  j["patch_size"] = patch_size;
  j["num_channels"] = num_channels;
  j["qkv_bias"] = qkv_bias;
  j["encoder_stride"] = encoder_stride;
  j["num_labels"] = num_labels;
  json id2l = json::object(), l2id = json::object();
  for (int64_t i = 0; i < num_labels; ++i) {
    id2l[std::to_string(i)] = label(i);
    l2id[label(i)] = i;  // an integer, as transformers writes it (config.id2label[config.label2id[name]])
  }
  j["id2label"] = id2l;
  j["label2id"] = l2id;
  j["torch_dtype"] = "float32";  // the dtype of the weights saved beside it (fp32 masters)
  return j.dump(2);
}

void ViTConfig::save(const std::string& path) const { write_file_atomic(path, to_json_string()); }

ViTConfig ViTConfig::preset(const std::string& name) {
  ViTConfig c;
  auto set = [&](int64_t h, int64_t layers, int64_t heads, int64_t patch) {
    c.hidden_size = h;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * h;
    c.patch_size = patch;
  };
  // Hugging Face's checkpoint names (google/vit-...) are accepted for the shapes they name;
  // ViT-g/14 has none there (timm's vit_giant_patch14_224).
  const std::string n = name.rfind("google/", 0) == 0 ? name.substr(7) : name;
  if (n == "vit-tiny") set(192, 12, 3, 16);
  else if (n == "vit-small") set(384, 12, 6, 16);
  else if (n == "vit-base" || n == "vit-base-patch16-224" || n == "vit-base-patch16-224-in21k") set(768, 12, 12, 16);
  else if (n == "vit-large" || n == "vit-large-patch16-224" || n == "vit-large-patch16-224-in21k") set(1024, 24, 16, 16);
  else if (n == "vit-huge" || n == "vit-huge-patch14-224-in21k") set(1280, 32, 16, 14);
  else if (n == "vit-giant" || n == "vit-giant-patch14-224") {  // ViT-g/14 (Zhai et al., 2022): MLP 6144, not 4 x 1408
    set(1408, 40, 16, 14);
    c.intermediate_size = 6144;
  }
  else if (n == "vit-fashion-mnist") {  // 28 x 28 grayscale in 7 x 7 patches: 16 tokens and the class token
    set(64, 4, 4, 7);
    c.intermediate_size = 128;
    c.image_size = 28;
    c.num_channels = 1;
  } else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    BOOSTER_THROW(ValueError, "unknown ViT preset '", name, "' (known: ", names, ")");
  }
  return c;
}

std::vector<std::string> ViTConfig::preset_names() { return {"vit-tiny", "vit-small", "vit-base", "vit-large", "vit-huge", "vit-giant", "vit-fashion-mnist",
          "google/vit-base-patch16-224", "google/vit-large-patch16-224", "google/vit-huge-patch14-224-in21k"};
}

}  // namespace booster::nn
