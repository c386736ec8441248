// GPT-2's structure: transformers' names, shapes and type names, the tied head, config.json
// round trips and refusals, causality, the stages matching the whole forward, and bad
// input (ids past the vocabulary, sequences past n_positions) named.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/autograd/grad_mode.h"
#include "nn/gpt2.h"
#include "tests/support/fixtures.h"

using namespace booster;
using testkit::error_of;
using namespace booster::nn;

namespace {

Tensor ids(const std::vector<int64_t>& v, int64_t b, int64_t t) { return Tensor::from_ints(v, {b, t}); }

}  // namespace

TEST(GPT2, TransformersNamesShapesAndTypes) {
  GPT2Config c = GPT2Config::preset("gpt2-tiny");  // 32 wide, 2 blocks, 2 heads, vocabulary 65, 64 positions
  GPT2LMHeadModel m(c);
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : m.named_parameters()) shapes[n] = p.shape();
  const std::map<std::string, Shape> want = {
      {"transformer.wte.weight", {65, 32}},         {"transformer.wpe.weight", {64, 32}},
      {"transformer.h.0.ln_1.weight", {32}},        {"transformer.h.0.ln_1.bias", {32}},
      {"transformer.h.0.attn.c_attn.weight", {32, 96}}, {"transformer.h.0.attn.c_attn.bias", {96}},
      {"transformer.h.0.attn.c_proj.weight", {32, 32}}, {"transformer.h.0.attn.c_proj.bias", {32}},
      {"transformer.h.0.ln_2.weight", {32}},        {"transformer.h.0.ln_2.bias", {32}},
      {"transformer.h.0.mlp.c_fc.weight", {32, 128}}, {"transformer.h.0.mlp.c_fc.bias", {128}},
      {"transformer.h.0.mlp.c_proj.weight", {128, 32}}, {"transformer.h.0.mlp.c_proj.bias", {32}},
      {"transformer.ln_f.weight", {32}},            {"transformer.ln_f.bias", {32}}};
  for (auto& [n, s] : want) {
    ASSERT_TRUE(shapes.count(n)) << n;
    EXPECT_EQ(shapes[n], s) << n;
  }
  EXPECT_EQ(shapes.size(), want.size() + 12);  // block 1 as block 0; no lm_head.weight while tied
  EXPECT_EQ(m.get("transformer.h.1")->type_name(), "GPT2Block");
  EXPECT_EQ(m.get("transformer.h.1.attn")->type_name(), "GPT2Attention");
  EXPECT_EQ(m.get("transformer.h.1.mlp")->type_name(), "GPT2MLP");
  EXPECT_EQ(m.get("transformer.h.1.mlp.c_fc")->type_name(), "Conv1D");
  // c_proj weights start at initializer_range / sqrt(2 n_layer), the others at initializer_range.
  auto stdev = [](const Tensor& t) {
    double s = 0;
    for (float v : t.to_vector()) s += double(v) * v;
    return std::sqrt(s / double(t.numel()));
  };
  manual_seed(3);
  GPT2Config big = c;
  big.n_embd = 128, big.n_head = 4;
  GPT2LMHeadModel w(big);
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : w.named_parameters()) p[n] = t;
  EXPECT_NEAR(stdev(p["transformer.h.0.mlp.c_fc.weight"]), 0.02, 0.002);
  EXPECT_NEAR(stdev(p["transformer.h.0.mlp.c_proj.weight"]), 0.02 / 2.0, 0.001);
  // Untied: a head of its own; nanoGPT's bias = false: no biases anywhere.
  c.tie_word_embeddings = false;
  c.bias = false;
  GPT2LMHeadModel u(c);
  std::map<std::string, Shape> us;
  for (auto& [n, t] : u.named_parameters()) us[n] = t.shape();
  EXPECT_EQ(us["lm_head.weight"], (Shape{65, 32}));
  for (auto& [n, s] : us) EXPECT_EQ(n.find(".bias"), std::string::npos) << n;
}

TEST(GPT2, ConfigRoundTripAndOtherModelsRefused) {
  GPT2Config c = GPT2Config::preset("shakespeare-char");
  GPT2Config back = GPT2Config::from_json_string(c.to_json_string());
  EXPECT_EQ(back.n_embd, 128);
  EXPECT_EQ(back.n_layer, 4);
  EXPECT_EQ(back.n_positions, 64);
  EXPECT_FALSE(back.bias);
  EXPECT_EQ(back.resid_pdrop, 0.0);
  GPT2Config d = GPT2Config::from_json_string(R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_inner": null})");
  EXPECT_EQ(d.inner(), 256);
  EXPECT_EQ(d.vocab_size, 50257);
  EXPECT_NE(error_of([] { GPT2Config::from_json_string(R"({"hidden_size": 64})", "x/config.json"); })
                .find("x/config.json: key 'hidden_size' is not GPT-2's"),
            std::string::npos);
  EXPECT_NE(error_of([] { GPT2Config::from_json_string(R"({"model_type": "llama"})"); }).find("model_type 'llama'"),
            std::string::npos);
  EXPECT_NE(error_of([] { GPT2Config::from_json_string(R"({"n_embd": "wide"})"); }).find("key 'n_embd' has the wrong type"),
            std::string::npos);
  EXPECT_NE(error_of([] { GPT2Config::from_json_string(R"({"n_embd": 30, "n_head": 4})"); }).find("multiple of n_head"),
            std::string::npos);
  EXPECT_NE(error_of([] { GPT2Config::preset("gpt3"); }).find("known: gpt2,"), std::string::npos);
}

// Logits at position t depend on tokens 0..t only; the loss at initialization is about
// ln(vocabulary); the stages of any split give the whole forward's logits.
TEST(GPT2, CausalAndStagesMatchTheWholeModel) {
  manual_seed(7);
  GPT2Config c = GPT2Config::preset("gpt2-tiny");
  c.tie_word_embeddings = false;  // its own lm_head on the last stage
  GPT2LMHeadModel m(c);
  m.eval();
  NoGradGuard ng;
  std::vector<int64_t> a{1, 5, 9, 3, 7, 2, 8, 4}, b = a;
  b[5] = 60;
  const auto la = m(ids(a, 1, 8)).logits.to_vector(), lb = m(ids(b, 1, 8)).logits.to_vector();
  for (size_t i = 0; i < size_t(5 * 65); ++i) EXPECT_EQ(la[i], lb[i]) << "position " << i / 65 << " saw a later token";
  EXPECT_NE(la[5 * 65], lb[5 * 65]);
  auto out = m(ids(a, 1, 8), ids(a, 1, 8));
  EXPECT_NEAR(out.loss.item(), std::log(65.0), 0.5);
  TensorMap in{{"input_ids", ids(a, 1, 8)}};
  TensorMap s0 = m.stage_forward(in, {0, 1, true, false});
  TensorMap s1 = m.stage_forward(s0, {1, 2, false, true});
  const auto got = s1.at("logits").to_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], la[i], 1e-5) << i;
  EXPECT_EQ(m.stage_modules({1, 2, false, true}), (std::vector<std::string>{"transformer.h.1", "transformer.ln_f", "lm_head"}));
  // A tied head: the last stage keeps a copy of wte, named as the tied parameter.
  GPT2LMHeadModel tied(GPT2Config::preset("gpt2-tiny"));
  EXPECT_EQ(tied.stage_modules({1, 2, false, true}),
            (std::vector<std::string>{"transformer.h.1", "transformer.ln_f", "transformer.wte"}));
  EXPECT_EQ(tied.tied_parameters(), (std::vector<std::string>{"transformer.wte.weight"}));
  EXPECT_TRUE(m.tied_parameters().empty());
  EXPECT_EQ(tied.stage_modules({1, 2, false, false}), (std::vector<std::string>{"transformer.h.1"}));  // a layer alone
}

TEST(GPT2, BadInputIsNamed) {
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));
  NoGradGuard ng;
  EXPECT_NE(error_of([&] { m(ids({1, 65}, 1, 2)); }).find("id 65 at position 1"), std::string::npos);
  std::vector<int64_t> long_seq(65, 1);
  EXPECT_NE(error_of([&] { m(ids(long_seq, 1, 65)); }).find("a sequence of 65 tokens is past n_positions 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m(ids({1, 2, 3}, 1, 3), ids({1, 2}, 1, 2)); }).find("labels [1, 2] must be shaped as input_ids [1, 3]"),
            std::string::npos);
}
