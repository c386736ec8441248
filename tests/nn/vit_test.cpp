// ViT structure: Hugging Face names and shapes, presets, configs, pretrained round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "nn/pretrained.h"
#include "nn/safetensors.h"

using namespace booster;
using namespace booster::nn;
namespace fs = std::filesystem;

namespace {
ViTConfig small_config() {
  ViTConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.image_size = 16;
  c.patch_size = 8;
  c.num_labels = 3;
  return c;
}
int64_t count(const Module& m) {
  int64_t n = 0;
  for (auto& p : m.parameters()) n += p.numel();
  return n;
}
}  // namespace

TEST(ViT, HuggingFaceNamesAndShapes) {
  ViTForImageClassification m(small_config());
  auto params = m.named_parameters();
  EXPECT_EQ(params[0].first, "vit.embeddings.cls_token");
  EXPECT_EQ(params[1].first, "vit.embeddings.position_embeddings");
  EXPECT_EQ(params[1].second.shape(), (Shape{1, 5, 32}));
  EXPECT_EQ(params[2].first, "vit.embeddings.patch_embeddings.projection.weight");
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.1.attention.attention.query.weight"));
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.0.attention.output.dense.bias"));
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.0.intermediate.dense.weight"));
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.0.output.dense.weight"));
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.0.layernorm_before.weight"));
  EXPECT_NO_THROW(m.get_tensor("vit.encoder.layer.0.layernorm_after.bias"));
  EXPECT_NO_THROW(m.get_tensor("vit.layernorm.weight"));
  EXPECT_EQ(params.back().first, "classifier.bias");
  // 2 embeddings + 2 patch + 2 layers * 16 + 2 final norm + 2 classifier
  EXPECT_EQ(params.size(), 40u);
  auto out = m(Tensor::zeros({2, 3, 16, 16}), Tensor::from_ints({0, 2}, {2}));
  EXPECT_EQ(out.logits.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.loss.numel(), 1);
  EXPECT_THROW(m(Tensor::zeros({2, 3, 15, 16})), ShapeError);
}

TEST(ViT, InitializationFollowsHuggingFace) {
  manual_seed(0);
  ViTConfig c = small_config();
  c.hidden_size = 64, c.intermediate_size = 128;
  ViTForImageClassification m(c);
  auto w = m.get_tensor("vit.encoder.layer.0.intermediate.dense.weight").to_vector();
  double s = 0;
  for (float v : w) s += double(v) * v;
  EXPECT_NEAR(std::sqrt(s / double(w.size())), 0.02, 0.002);
  for (float v : m.get_tensor("vit.encoder.layer.0.intermediate.dense.bias").to_vector()) EXPECT_EQ(v, 0.f);
  for (float v : m.get_tensor("vit.layernorm.weight").to_vector()) EXPECT_EQ(v, 1.f);
}

TEST(ViT, PresetsHaveTheirSizes) {
  ViTConfig base = ViTConfig::preset("vit-base");
  EXPECT_EQ(base.hidden_size, 768);
  EXPECT_EQ(base.num_attention_heads, 12);
  EXPECT_EQ(ViTConfig::preset("vit-huge").patch_size, 14);
  EXPECT_EQ(ViTConfig::preset("vit-tiny").num_attention_heads, 3);
  EXPECT_THROW(ViTConfig::preset("vit-gigantic"), ValueError);
  ViTConfig tiny = ViTConfig::preset("vit-tiny");
  tiny.num_labels = 1000;
  SkipInitGuard skip;  // sizes only
  EXPECT_EQ(count(ViTForImageClassification(tiny)), 5717416);  // timm/HF ViT-Ti/16: 5.7 M
}

TEST(ViT, ConfigJsonErrorsNameTheKey) {
  EXPECT_THROW(ViTConfig::from_json_string("{\"hidden_size\": \"big\"}"), ValueError);
  try {
    ViTConfig::from_json_string("{\"hidden_size\": 30, \"num_attention_heads\": 4}", "x/config.json");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
  ViTConfig c = ViTConfig::from_json_string(R"({"id2label": {"0": "a", "1": "b"}})");
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(c.label(1), "b");
  ViTConfig back = ViTConfig::from_json_string(c.to_json_string());
  EXPECT_EQ(back.label(0), "a");
  EXPECT_EQ(back.hidden_size, 768);
  // As transformers writes it: label2id values are integers, so
  // config.id2label[config.label2id["b"]] works; torch_dtype is written.
  const auto j = nlohmann::json::parse(c.to_json_string());
  ASSERT_TRUE(j.at("label2id").at("b").is_number_integer()) << j.at("label2id").dump();
  EXPECT_EQ(j.at("id2label").at(std::to_string(j.at("label2id").at("b").get<int>())), "b");
  EXPECT_EQ(j.at("torch_dtype"), "float32");
}

TEST(ViT, PretrainedRoundTripAndLabelOverride) {
  const fs::path dir = fs::temp_directory_path() / ("booster_vit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ViTConfig c = small_config();
  c.num_labels = 5;
  ViTForImageClassification m(c);
  save_pretrained(m, dir.string(), 20000);  // sharded
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  auto back = vit_from_pretrained(dir.string());
  for (auto& [n, t] : m.state_dict()) EXPECT_EQ(back->get_tensor(n).to_vector(), t.to_vector()) << n;

  FromPretrainedOptions o;
  o.label_names = {"angular_leaf_spot", "bean_rust", "healthy"};
  EXPECT_THROW(vit_from_pretrained(dir.string(), o), ValueError);  // classifier [5, 32] vs [3, 32]
  o.ignore_mismatched_sizes = true;
  auto beans = vit_from_pretrained(dir.string(), o);
  EXPECT_EQ(beans->get_tensor("classifier.weight").shape(), (Shape{3, 32}));
  EXPECT_EQ(beans->config().label(1), "bean_rust");
  EXPECT_EQ(beans->get_tensor("vit.layernorm.weight").to_vector(), m.get_tensor("vit.layernorm.weight").to_vector());
}
