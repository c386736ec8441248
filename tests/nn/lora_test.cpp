// LoRA (nn/lora.h): which layers PEFT's matching picks, the layer's forward and gradients,
// what trains and what stays frozen, PEFT's adapter_config.json, merge_and_unload, and
// every bad input named.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/kernels/ops.h"
#include "core/kernels/raw.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/lora.h"
#include "nn/vit.h"
#include "tests/support/fixtures.h"

using namespace booster;

namespace {

std::shared_ptr<nn::ViTForImageClassification> vit(uint64_t seed = 5) {
  manual_seed(seed);
  return std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(2));
}

Tensor images(int64_t rows = 3) {
  Tensor x = Tensor::empty({rows, 3, 8, 8});
  Generator(9).normal_(x);
  return x;
}

// Random values in every lora_B (PEFT starts it at zero, which would hide the adapter).
void randomize_adapters(nn::Module& m, uint64_t seed) {
  NoGradGuard ng;
  Generator g(seed);
  for (auto& [name, p] : m.named_parameters())
    if (name.find("lora_") != std::string::npos) {
      Tensor t = p;
      g.normal_(t);
      kernels::scale_(t, 0.1);
    }
}

}  // namespace

TEST(Lora, DefaultTargetsArePeftsAndOnlyAdaptersTrain) {
  auto m = vit();
  const Tensor x = images();
  Tensor before;
  {
    NoGradGuard ng;
    before = m->forward(x).logits;
  }
  nn::LoraConfig c;
  c.r = 4, c.lora_alpha = 8;
  const nn::LoraState st = nn::inject_lora(*m, c);
  EXPECT_EQ(st.config.target_modules, (std::vector<std::string>{"query", "value"}));  // PEFT's ViT default
  ASSERT_EQ(st.adapted.size(), 4u);  // 2 layers x (query, value)
  EXPECT_EQ(st.adapted[0], "vit.encoder.layer.0.attention.attention.query");
  EXPECT_EQ(m->get(st.adapted[0])->type_name(), "LoraLinear");
  EXPECT_EQ(m->get("vit.encoder.layer.0.attention.attention.key")->type_name(), "Linear");
  auto lora = std::dynamic_pointer_cast<nn::LoraLinear>(m->get(st.adapted[0]));
  EXPECT_DOUBLE_EQ(lora->scaling(), 2.0);
  // PEFT's parameter names (adapter name left out) and shapes: A [r, in], B [out, r] zero.
  EXPECT_EQ(m->get_tensor(st.adapted[0] + ".lora_A.weight").shape(), (Shape{4, 16}));
  EXPECT_EQ(m->get_tensor(st.adapted[0] + ".lora_B.weight").shape(), (Shape{16, 4}));
  EXPECT_EQ(m->get_tensor(st.adapted[0] + ".base_layer.weight").shape(), (Shape{16, 16}));
  for (float v : m->get_tensor(st.adapted[0] + ".lora_B.weight").to_vector()) EXPECT_EQ(v, 0.0f);
  const auto trainable = nn::trainable_parameters(*m);
  ASSERT_EQ(trainable.size(), 8u);
  for (auto& [name, p] : trainable) EXPECT_NE(name.find(".lora_"), std::string::npos) << name;
  // B = 0: the adapted model computes what the base did, to rounding: the adapted query and
  // value are products of their own, no longer one stacked with the key (oneDNN's AVX2
  // kernels block a product by its width, and a sum's order changes with it).
  EXPECT_LT(testkit::max_abs_diff(m->forward(x).logits, before), 1e-6f);
  // Gradients reach the adapters only (A's is 0 while B is; B's is not).
  auto out = m->forward(x, Tensor::from_ints({0, 1, 2}, {3}));
  out.loss.backward();
  for (auto& [name, p] : m->named_parameters()) {
    if (!p.requires_grad()) {
      EXPECT_FALSE(p.grad().defined()) << name;
      continue;
    }
    ASSERT_TRUE(p.grad().defined()) << name;
  }
  float gb = 0;
  for (float v : m->get_tensor(st.adapted[0] + ".lora_B.weight").grad().to_vector()) gb = std::max(gb, std::abs(v));
  EXPECT_GT(gb, 0.0f);
}

TEST(Lora, ForwardIsBasePlusScaledLowRankProduct) {
  auto m = vit();
  nn::LoraConfig c;
  c.r = 2, c.lora_alpha = 3, c.use_rslora = true, c.target_modules = {"dense"}, c.layers_to_transform = {1};
  const auto st = nn::inject_lora(*m, c);
  // "dense" ends the attention output's, the intermediate's and the output's paths; layer 1 only.
  ASSERT_EQ(st.adapted.size(), 3u);
  for (auto& p : st.adapted) EXPECT_EQ(p.rfind("vit.encoder.layer.1.", 0), 0u) << p;
  randomize_adapters(*m, 3);
  auto lora = std::dynamic_pointer_cast<nn::LoraLinear>(m->get(st.adapted[0]));
  EXPECT_NEAR(lora->scaling(), 3.0 / std::sqrt(2.0), 1e-12);  // rsLoRA: alpha / sqrt(r)
  Tensor x = Tensor::empty({5, 16});
  Generator(4).normal_(x);
  NoGradGuard ng;
  const Tensor w = lora->base_layer->get_tensor("weight"), b = lora->base_layer->get_tensor("bias");
  const Tensor a = lora->lora_A->weight, bb = lora->lora_B->weight;
  Tensor want = add(linear(x, w, b), scale(matmul(matmul(x, a.transpose(0, 1)), bb.transpose(0, 1)), lora->scaling()));
  EXPECT_LT(testkit::max_abs_diff(lora->forward(x), want), 1e-5);
}

TEST(Lora, MergeAndUnloadGivesTheSameLogitsForLinearAndConv1D) {
  auto m = vit();
  nn::LoraConfig c;
  c.target_modules = {"all-linear"};
  c.bias = "lora_only";
  auto st = nn::inject_lora(*m, c);
  EXPECT_EQ(st.adapted.size(), 2u * 6 + 1);  // q, k, v, attention output, intermediate, output; the classifier
  EXPECT_TRUE(m->get_tensor(st.adapted[0] + ".base_layer.bias").requires_grad());  // lora_only
  EXPECT_FALSE(m->get_tensor("vit.layernorm.bias").requires_grad());
  randomize_adapters(*m, 7);
  const Tensor x = images();
  NoGradGuard ng;
  const Tensor adapted = m->forward(x).logits;
  EXPECT_EQ(nn::merge_and_unload(*m).size(), st.adapted.size());
  EXPECT_EQ(m->get(st.adapted[0])->type_name(), "Linear");
  EXPECT_EQ(m->state_dict().size(), vit()->state_dict().size());  // the plain model's names again
  EXPECT_LT(testkit::max_abs_diff(m->forward(x).logits, adapted), 1e-5);

  // GPT-2's c_attn is a Conv1D: weight [in, out], so fan_in_fan_out (PEFT sets it, warning).
  manual_seed(3);
  auto g = std::make_shared<nn::GPT2LMHeadModel>(nn::GPT2Config::preset("gpt2-tiny"));
  auto gs = nn::inject_lora(*g, nn::LoraConfig{});
  ASSERT_EQ(gs.adapted.size(), 2u);  // c_attn of both layers: PEFT's GPT-2 default
  auto l = std::dynamic_pointer_cast<nn::LoraLinear>(g->get(gs.adapted[0]));
  EXPECT_TRUE(l->fan_in_fan_out());
  EXPECT_EQ(l->in_features(), 32);
  EXPECT_EQ(l->out_features(), 96);
  randomize_adapters(*g, 8);
  Tensor ids = Tensor::from_ints({1, 5, 9, 2, 7, 3}, {1, 6});
  const Tensor lg = g->forward(ids).logits;
  nn::merge_and_unload(*g);
  EXPECT_EQ(g->get(gs.adapted[0])->type_name(), "Conv1D");
  EXPECT_LT(testkit::max_abs_diff(g->forward(ids).logits, lg), 1e-5);
}

TEST(Lora, PatternsBiasModesAndModulesToSave) {
  manual_seed(2);
  auto m = std::make_shared<nn::LlamaForCausalLM>(nn::LlamaConfig::preset("llama-tiny"));
  nn::LoraConfig c;
  c.target_modules = {"model\\.layers\\.\\d+\\.self_attn\\.(q|k)_proj"};
  c.target_modules_regex = true;
  c.rank_pattern = {{"k_proj", 2}};
  c.alpha_pattern = {{"layers\\.0\\.self_attn\\.q_proj", 32.0}};
  c.bias = "all";
  c.modules_to_save = {"lm_head"};
  const auto st = nn::inject_lora(*m, c);
  ASSERT_FALSE(st.adapted.empty());
  for (auto& p : st.adapted) {
    auto l = std::dynamic_pointer_cast<nn::LoraLinear>(m->get(p));
    const bool k = p.find("k_proj") != std::string::npos;
    EXPECT_EQ(l->r(), k ? 2 : 8) << p;
    const bool q0 = p == "model.layers.0.self_attn.q_proj";
    EXPECT_DOUBLE_EQ(l->scaling(), q0 ? 32.0 / 8 : k ? 8.0 / 2 : 1.0) << p;
  }
  EXPECT_EQ(m->get("model.layers.0.self_attn.v_proj")->type_name(), "Linear");
  const bool tied = m->get_tensor("model.embed_tokens.weight").is_same(m->get_tensor("lm_head.weight"));
  if (!tied) {
    EXPECT_TRUE(m->get_tensor("lm_head.weight").requires_grad());
  }
  EXPECT_TRUE(st.is_adapter_tensor("lm_head.weight"));
  EXPECT_TRUE(st.is_adapter_tensor("model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_FALSE(st.is_adapter_tensor("model.layers.0.self_attn.q_proj.base_layer.weight"));
  EXPECT_FALSE(m->get_tensor("model.norm.weight").requires_grad());
}

TEST(Lora, AdapterConfigJsonRoundTripsAndRefusesWhatItCannotDo) {
  nn::LoraConfig c;
  c.r = 16, c.lora_alpha = 32, c.lora_dropout = 0.05, c.target_modules = {"query", "value"};
  c.modules_to_save = {"classifier"}, c.use_rslora = true, c.rank_pattern = {{"value", 4}};
  c.base_model_name_or_path = "runs/vit/hf";
  const std::string text = c.to_json_string();
  EXPECT_NE(text.find("\"peft_type\": \"LORA\""), std::string::npos) << text;
  const auto back = nn::LoraConfig::from_json_string(text);
  EXPECT_EQ(back.to_json_string(), text);
  EXPECT_EQ(back.rank_pattern.at("value"), 4);
  auto err = [](const std::string& json) { return testkit::error_of([&] { nn::LoraConfig::from_json_string(json, "a.json"); }); };
  EXPECT_NE(err(R"({"r": 0})").find("r must be a positive integer"), std::string::npos);
  EXPECT_NE(err(R"({"use_dora": true})").find("use_dora"), std::string::npos);
  EXPECT_NE(err(R"({"lora_rank": 8})").find("key 'lora_rank'"), std::string::npos);
  EXPECT_NE(err(R"({"peft_type": "IA3"})").find("IA3"), std::string::npos);
  EXPECT_NE(err(R"({"bias": "some"})").find("bias 'some'"), std::string::npos);
  EXPECT_NE(err(R"({"r": "eight"})").find("key 'r'"), std::string::npos);
  // PEFT's own keys of other versions are taken; a string target_modules is a regex.
  const auto p = nn::LoraConfig::from_json_string(
      R"({"peft_type": "LORA", "revision": null, "inference_mode": true, "target_modules": ".*query", "r": 4,
          "init_lora_weights": "gaussian", "lora_bias": false})");
  EXPECT_TRUE(p.target_modules_regex);
  EXPECT_EQ(p.init_lora_weights, "gaussian");
}

TEST(Lora, BadTargetsAreNamed) {
  auto inject = [](nn::LoraConfig c) { return testkit::error_of([&] { nn::inject_lora(*vit(), c); }); };
  nn::LoraConfig c;
  c.target_modules = {"q_proj"};
  EXPECT_NE(inject(c).find("target modules [q_proj] not found"), std::string::npos) << inject(c);
  c.target_modules = {"attention"};
  EXPECT_NE(inject(c).find("is a ViTAttention, not supported"), std::string::npos) << inject(c);
  c.target_modules = {"query"}, c.modules_to_save = {"head"};
  EXPECT_NE(inject(c).find("modules_to_save 'head' matches no module"), std::string::npos) << inject(c);
  c.modules_to_save = {}, c.r = 0;
  EXPECT_NE(inject(c).find("r must be a positive integer"), std::string::npos);
  c.r = 8, c.target_modules = {"(query"}, c.target_modules_regex = true;
  EXPECT_NE(inject(c).find("not a valid regular expression"), std::string::npos) << inject(c);
  auto m = vit();
  nn::inject_lora(*m, nn::LoraConfig{});
  EXPECT_NE(testkit::error_of([&] { nn::inject_lora(*m, nn::LoraConfig{}); }).find("already has adapters"),
            std::string::npos);
  // Adapters of another base: shapes named.
  auto other = vit();
  auto st = nn::inject_lora(*other, nn::LoraConfig{});
  nn::StateDict file;
  for (auto& [name, p] : other->named_parameters())
    if (st.is_adapter_tensor(name)) file.emplace_back(nn::kPeftPrefix + name, Tensor::zeros({3, 3}));
  const std::string e = testkit::error_of([&] { nn::load_lora_tensors(*other, st, file, "x.safetensors"); });
  EXPECT_NE(e.find("is [3, 3] but the model's is [8, 16]"), std::string::npos) << e;
}

// Activation checkpointing over a frozen base (Colossal-AI issue 5507): the adapters inside
// the checkpointed layers still get their gradients, equal to the plain run's.
TEST(Lora, CheckpointedLayersOverAFrozenBaseStillTrainTheAdapters) {
  auto grads = [](bool ckpt) {
    auto m = vit();
    nn::inject_lora(*m, nn::LoraConfig{});
    randomize_adapters(*m, 4);
    if (ckpt) m->gradient_checkpointing_enable();
    m->forward(images(), Tensor::from_ints({0, 1, 2}, {3})).loss.backward();
    std::map<std::string, Tensor> g;
    for (auto& [name, p] : nn::trainable_parameters(*m)) g[name] = p.grad();
    return g;
  };
  const auto plain = grads(false), ckpt = grads(true);
  ASSERT_EQ(plain.size(), 8u);
  for (auto& [name, g] : plain) {
    ASSERT_TRUE(ckpt.at(name).defined()) << name;
    EXPECT_LT(testkit::max_abs_diff(ckpt.at(name), g), 1e-6) << name;
  }
}
