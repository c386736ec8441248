// LLaMA's structure: transformers' names, shapes and type names, config.json round trips
// and refusals, rotary embeddings (relative: a shift of every position leaves q.k alone),
// grouped-query heads, causality, the stages matching the whole forward, bad input named.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/autograd/grad_mode.h"
#include "core/tensor/random.h"
#include "nn/llama.h"
#include "tests/support/fixtures.h"

using namespace booster;
using testkit::error_of;
using namespace booster::nn;

namespace {

Tensor ids(const std::vector<int64_t>& v, int64_t b, int64_t t) { return Tensor::from_ints(v, {b, t}); }

}  // namespace

TEST(Llama, TransformersNamesShapesAndTypes) {
  LlamaConfig c = LlamaConfig::preset("llama-tiny");  // 32 wide, MLP 64, 2 layers, 4 heads, 2 kv heads, vocabulary 65
  LlamaForCausalLM m(c);
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : m.named_parameters()) shapes[n] = p.shape();
  const std::map<std::string, Shape> want = {
      {"model.embed_tokens.weight", {65, 32}},
      {"model.layers.0.input_layernorm.weight", {32}},
      {"model.layers.0.self_attn.q_proj.weight", {32, 32}},
      {"model.layers.0.self_attn.k_proj.weight", {16, 32}},  // 2 kv heads x 8
      {"model.layers.0.self_attn.v_proj.weight", {16, 32}},
      {"model.layers.0.self_attn.o_proj.weight", {32, 32}},
      {"model.layers.0.post_attention_layernorm.weight", {32}},
      {"model.layers.0.mlp.gate_proj.weight", {64, 32}},
      {"model.layers.0.mlp.up_proj.weight", {64, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 64}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {65, 32}}};
  for (auto& [n, s] : want) {
    ASSERT_TRUE(shapes.count(n)) << n;
    EXPECT_EQ(shapes[n], s) << n;
  }
  EXPECT_EQ(shapes.size(), want.size() + 9);  // layer 1 as layer 0; no biases
  EXPECT_EQ(m.get("model.layers.1")->type_name(), "LlamaDecoderLayer");
  EXPECT_EQ(m.get("model.layers.1.self_attn")->type_name(), "LlamaAttention");
  EXPECT_EQ(m.get("model.layers.1.mlp")->type_name(), "LlamaMLP");
  EXPECT_EQ(m.get("model.norm")->type_name(), "LlamaRMSNorm");
  c.tie_word_embeddings = true;
  LlamaForCausalLM tied(c);
  size_t n = 0;
  for (auto& [name, p] : tied.named_parameters()) n += name == "lm_head.weight";
  EXPECT_EQ(n, 0u);
}

TEST(Llama, ConfigRoundTripPresetsAndRefusals) {
  LlamaConfig back = LlamaConfig::from_json_string(LlamaConfig::preset("tinyllama-1.1b").to_json_string());
  EXPECT_EQ(back.hidden_size, 2048);
  EXPECT_EQ(back.kv_heads(), 4);
  EXPECT_EQ(back.intermediate_size, 5632);
  EXPECT_EQ(back.rms_norm_eps, 1e-5);
  LlamaConfig d = LlamaConfig::from_json_string(R"({"model_type": "llama", "num_key_value_heads": null})");
  EXPECT_EQ(d.kv_heads(), 32);  // transformers' default: as many as the query heads
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_NE(error_of([] { LlamaConfig::from_json_string(R"({"n_embd": 64})", "y/config.json"); })
                .find("y/config.json: key 'n_embd' is not LLaMA's"),
            std::string::npos);
  EXPECT_NE(error_of([] { LlamaConfig::from_json_string(R"({"model_type": "gpt2"})"); }).find("model_type 'gpt2'"),
            std::string::npos);
  EXPECT_NE(error_of([] { LlamaConfig::from_json_string(R"({"num_attention_heads": 32, "num_key_value_heads": 5})"); })
                .find("multiple of num_key_value_heads 5"),
            std::string::npos);
  EXPECT_NE(error_of([] { LlamaConfig::from_json_string(R"({"rope_scaling": {"type": "linear", "factor": 2.0}})"); })
                .find("rope_scaling is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] { LlamaConfig::from_json_string(R"({"hidden_act": "gelu"})"); }).find("hidden_act 'gelu'"),
            std::string::npos);
  EXPECT_NE(error_of([] { LlamaConfig::preset("llama-3"); }).find("known: llama-tiny,"), std::string::npos);
  // Llama-2-7B's shapes give its 6.74 B parameters.
  const LlamaConfig s = LlamaConfig::preset("llama-2-7b");
  const int64_t e = s.hidden_size, per_layer = 4 * e * e + 3 * e * s.intermediate_size + 2 * e;
  EXPECT_EQ(2 * s.vocab_size * e + s.num_hidden_layers * per_layer + e, 6738415616);
}

// Rotary embeddings rotate pairs (i, i + d/2) by position x frequency: the dot product of a
// rotated query and key depends on their distance only, and position 0 is the identity.
TEST(Llama, RotaryIsRelativeAndRepeatKvServesConsecutiveHeads) {
  Generator g(5);
  Tensor q = Tensor::empty({1, 1, 1, 8}), k = Tensor::empty({1, 1, 1, 8});
  g.normal_(q), g.normal_(k);
  auto dot = [](const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item(); };
  const double near = dot(rotary_embedding(q, 7, 10000.0), rotary_embedding(k, 4, 10000.0));
  EXPECT_NEAR(dot(rotary_embedding(q, 103, 10000.0), rotary_embedding(k, 100, 10000.0)), near, 1e-4);
  EXPECT_GT(std::abs(dot(rotary_embedding(q, 9, 10000.0), rotary_embedding(k, 4, 10000.0)) - near), 1e-4);
  const auto same = rotary_embedding(q, 0, 10000.0).to_vector(), orig = q.to_vector();
  for (size_t i = 0; i < orig.size(); ++i) EXPECT_FLOAT_EQ(same[i], orig[i]);
  // [B, T, kv = 2, d] -> [B, T, 4, d]: heads 0 and 1 are kv head 0, heads 2 and 3 kv head 1.
  Tensor kv = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_EQ(repeat_kv(kv, 2, 2).to_vector(), (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4}));
}

TEST(Llama, CausalAndStagesMatchTheWholeModel) {
  manual_seed(8);
  LlamaForCausalLM m(LlamaConfig::preset("llama-tiny"));
  m.eval();
  NoGradGuard ng;
  std::vector<int64_t> a{1, 5, 9, 3, 7, 2, 8, 4}, b = a;
  b[5] = 60;
  const auto la = m(ids(a, 1, 8)).logits.to_vector(), lb = m(ids(b, 1, 8)).logits.to_vector();
  for (size_t i = 0; i < size_t(5 * 65); ++i) ASSERT_EQ(la[i], lb[i]) << "position " << i / 65 << " saw a later token";
  EXPECT_NE(la[5 * 65], lb[5 * 65]);
  EXPECT_NEAR(m(ids(a, 1, 8), ids(a, 1, 8)).loss.item(), std::log(65.0), 0.5);
  TensorMap s0 = m.stage_forward({{"input_ids", ids(a, 1, 8)}}, {0, 1, true, false});
  const auto got = m.stage_forward(s0, {1, 2, false, true}).at("logits").to_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], la[i], 1e-5) << i;
  EXPECT_EQ(m.stage_modules({1, 2, false, true}),
            (std::vector<std::string>{"model.layers.1", "model.norm", "lm_head"}));
}

TEST(Llama, BadInputIsNamed) {
  LlamaForCausalLM m(LlamaConfig::preset("llama-tiny"));
  NoGradGuard ng;
  EXPECT_NE(error_of([&] { m(ids({1, 65}, 1, 2)); }).find("id 65 at position 1"), std::string::npos);
  std::vector<int64_t> long_seq(65, 1);
  EXPECT_NE(error_of([&] { m(ids(long_seq, 1, 65)); }).find("a sequence of 65 tokens is past max_position_embeddings 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m(ids({1, 2, 3}, 1, 3), ids({1, 2}, 1, 2)); }).find("labels [1, 2] must be shaped"),
            std::string::npos);
}
