// Activation checkpointing: the same loss and gradients as without it (dropout included:
// the recomputation draws the same masks), the layers that run again, and the activation
// memory a checkpointed forward keeps against the theory.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "nn/activation_checkpoint.h"
#include "nn/llama.h"
#include "nn/vit.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;

namespace {

ViTConfig dropout_vit(int64_t layers) {
  ViTConfig c = testkit::tiny_vit(layers);
  c.hidden_dropout_prob = 0.1;
  c.attention_probs_dropout_prob = 0.1;
  return c;
}

// Loss and gradients of one training step from generator state `seed`.
std::pair<double, StateDict> step(ViTForImageClassification& m, uint64_t seed) {
  auto [x, y] = testkit::image_batch(4, 3);
  m.zero_grad();
  manual_seed(seed);
  Tensor loss = m(x, y).loss;
  loss.backward();
  StateDict grads;
  for (auto& [n, p] : m.named_parameters()) grads.emplace_back(n, p.grad());
  return {loss.item(), grads};
}

}  // namespace

TEST(GradientCheckpointing, SameLossAndGradientsWithDropout) {
  manual_seed(3);
  auto plain = std::make_shared<ViTForImageClassification>(dropout_vit(3));
  auto ckpt = std::dynamic_pointer_cast<ViTForImageClassification>(plain->clone());
  ckpt->gradient_checkpointing_enable();
  EXPECT_TRUE(ckpt->is_gradient_checkpointing());
  for (uint64_t seed : {11u, 12u}) {
    auto [lp, gp] = step(*plain, seed);
    auto [lc, gc] = step(*ckpt, seed);
    EXPECT_NEAR(lc, lp, 1e-6 * std::abs(lp)) << "seed " << seed;
    ASSERT_EQ(gp.size(), gc.size());
    for (size_t i = 0; i < gp.size(); ++i) {
      ASSERT_TRUE(gc[i].second.defined()) << gc[i].first;
      auto a = gc[i].second.to_vector(), b = gp[i].second.to_vector();
      for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-6) << gp[i].first << " element " << k;
    }
  }
  // The masks do depend on the seed (the check above is not vacuous).
  EXPECT_NE(step(*plain, 11).first, step(*plain, 12).first);
}

TEST(GradientCheckpointing, RatioPicksTheFirstLayersAndEvalRunsOnce) {
  manual_seed(3);
  auto m = std::make_shared<ViTForImageClassification>(testkit::tiny_vit(4));
  m->gradient_checkpointing_enable(0.5);
  std::vector<int> calls(4, 0);
  std::vector<HookHandle> hooks;
  for (int i = 0; i < 4; ++i)
    hooks.push_back(m->vit->encoder->layer->at(size_t(i))->register_forward_hook([&calls, i](Module&) { ++calls[size_t(i)]; }));
  auto [x, y] = testkit::image_batch(2, 3);
  m->train();
  Tensor loss = (*m)(x, y).loss;
  EXPECT_EQ(calls, (std::vector<int>{1, 1, 1, 1}));
  loss.backward();
  EXPECT_EQ(calls, (std::vector<int>{2, 2, 1, 1})) << "the first half of the layers ran again in backward";
  m->eval();
  (*m)(x, y);
  EXPECT_EQ(calls, (std::vector<int>{3, 3, 2, 2}));
  EXPECT_NE(testkit::error_of([&] { m->gradient_checkpointing_enable(1.5); }).find("ratio"), std::string::npos);
}

// What a forward keeps for backward: every layer's activations, or with checkpointing each
// layer's input only ([B, T, H] fp32), plus what the layers outside the encoder keep.
TEST(GradientCheckpointing, KeepsOneInputPerLayerInsteadOfItsActivations) {
  ViTConfig c = testkit::tiny_vit(6);
  c.hidden_size = 64, c.intermediate_size = 256, c.num_attention_heads = 4, c.image_size = 32, c.patch_size = 4;
  const int64_t B = 8, T = (32 / 4) * (32 / 4) + 1, L = 6;
  auto kept = [&](bool ckpt) {
    manual_seed(5);
    auto m = std::make_shared<ViTForImageClassification>(c);
    if (ckpt) m->gradient_checkpointing_enable();
    auto [x, y] = testkit::image_batch(B, 3, 32);
    const size_t before = host_tier().bytes_in_use();
    Tensor loss = (*m)(x, y).loss;
    const size_t held = host_tier().bytes_in_use() - before;
    loss.backward();
    return held;
  };
  const size_t plain = kept(false), ckpt = kept(true);
  const size_t layer_input = size_t(B * T * c.hidden_size) * sizeof(float);
  // A layer keeps far more than its input (the MLP's [B, T, 4H] alone is 4 inputs).
  EXPECT_GT(plain, 6 * L * layer_input) << "plain " << plain;
  // Checkpointed: the L inputs, plus embeddings, final norm and head (a few more [B, T, H]).
  EXPECT_LE(ckpt, (L + 6) * layer_input) << "checkpointed " << ckpt << " plain " << plain;
  std::printf("activations kept by the forward: plain %zu B, checkpointed %zu B (%zu layers, one input %zu B)\n", plain,
              ckpt, size_t(L), layer_input);
}

// GPT-2 (with its dropouts) and LLaMA: the same loss and gradients with their blocks
// checkpointed.
TEST(GradientCheckpointing, LanguageModelsSameLossAndGradients) {
  auto check = [](auto plain) {
    auto ckpt = std::dynamic_pointer_cast<typename decltype(plain)::element_type>(plain->clone());
    ckpt->gradient_checkpointing_enable();
    ASSERT_TRUE(ckpt->is_gradient_checkpointing());
    const Tensor ids = Tensor::from_ints({5, 9, 2, 61, 7, 3, 30, 1, 4, 8, 12, 40}, {2, 6});
    auto grads = [&](auto& m) {
      m.zero_grad();
      manual_seed(17);
      Tensor loss = m(ids, ids).loss;
      loss.backward();
      std::vector<float> g{float(loss.item())};
      for (auto& [n, p] : m.named_parameters())
        for (float v : p.grad().to_vector()) g.push_back(v);
      return g;
    };
    const auto a = grads(*plain), b = grads(*ckpt);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 1e-6) << i;
  };
  manual_seed(4);
  GPT2Config g = GPT2Config::preset("gpt2-tiny");
  g.resid_pdrop = g.embd_pdrop = g.attn_pdrop = 0.1;
  check(std::make_shared<GPT2LMHeadModel>(g));
  check(std::make_shared<LlamaForCausalLM>(LlamaConfig::preset("llama-tiny")));
}
