// Generation: the key/value cache gives the whole forward's logits token by token, cached
// and uncached generation agree (greedy and sampled, past n_positions too, where the
// context is cropped), and bad arguments are named.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;
using testkit::error_of;

namespace {

std::vector<int64_t> tokens(int64_t n, int64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (i * 7 + seed * 13 + 3) % 65;
  return v;
}

// Logits of every position, the cache filled by a prefix then a token at a time, against
// one whole forward.
void expect_cache_matches_whole(CausalLM& lm, const std::function<Tensor(const Tensor&)>& whole) {
  NoGradGuard ng;
  const int64_t b = 2, t = 7, prefix = 4;
  std::vector<int64_t> ids = tokens(b * t, 1);
  const Tensor all = whole(Tensor::from_ints(ids, {b, t}));  // [B, T, V]
  KVCache cache;
  auto slice = [&](int64_t from, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t r = 0; r < b; ++r) v.insert(v.end(), ids.begin() + r * t + from, ids.begin() + r * t + from + n);
    return Tensor::from_ints(v, {b, n});
  };
  std::vector<Tensor> parts{lm.forward_cached(slice(0, prefix), cache)};
  for (int64_t i = prefix; i < t; ++i) parts.push_back(lm.forward_cached(slice(i, 1), cache));
  EXPECT_EQ(cache.length(), t);
  const auto want = all.to_vector(), got = concat(parts, 1).to_vector();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << "logit " << i;
  EXPECT_NE(error_of([&] { lm.forward_cached(slice(0, 2), cache); }).find("tokens come one at a time"), std::string::npos);
}

}  // namespace

TEST(Generate, Gpt2CacheGivesTheWholeForwardsLogits) {
  manual_seed(11);
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));
  m.eval();
  expect_cache_matches_whole(m, [&](const Tensor& x) { return m(x).logits; });
}

TEST(Generate, LlamaCacheGivesTheWholeForwardsLogits) {
  manual_seed(13);
  LlamaForCausalLM m(LlamaConfig::preset("llama-tiny"));  // grouped: 4 query heads on 2 key/value heads
  m.eval();
  expect_cache_matches_whole(m, [&](const Tensor& x) { return m(x).logits; });
  const Tensor prompt = Tensor::from_ints(tokens(62, 3), {1, 62});
  GenerateOptions cached{.max_new_tokens = 5, .temperature = 0.0}, plain = cached;
  plain.use_cache = false;
  EXPECT_EQ(m.generate(prompt, cached).to_int_vector(), m.generate(prompt, plain).to_int_vector());
}

TEST(Generate, CachedAndUncachedAgreePastThePositions) {
  manual_seed(12);
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));  // 64 positions
  const Tensor prompt = Tensor::from_ints(tokens(2 * 60, 2), {2, 60});
  GenerateOptions greedy{.max_new_tokens = 10, .temperature = 0.0};
  GenerateOptions plain = greedy;
  plain.use_cache = false;
  const Tensor a = m.generate(prompt, greedy), b = m.generate(prompt, plain);
  EXPECT_EQ(a.shape(), (Shape{2, 70}));
  EXPECT_EQ(a.to_int_vector(), b.to_int_vector());
  EXPECT_TRUE(m.is_training());  // the mode restored
  // Sampling: the same seed draws the same text, cached or not; top_k = 1 is greedy.
  GenerateOptions s{.max_new_tokens = 12, .temperature = 0.8, .top_k = 5, .seed = 9};
  GenerateOptions su = s;
  su.use_cache = false;
  EXPECT_EQ(m.generate(prompt, s).to_int_vector(), m.generate(prompt, su).to_int_vector());
  GenerateOptions k1{.max_new_tokens = 10, .temperature = 1.5, .top_k = 1};
  EXPECT_EQ(m.generate(prompt, k1).to_int_vector(), a.to_int_vector());
  // The prompt is kept; every new id is in the vocabulary.
  const auto out = m.generate(prompt, s).to_int_vector();
  const auto in = prompt.to_int_vector();
  for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(out[size_t(i)], in[size_t(i)]);
  for (int64_t id : out) EXPECT_TRUE(id >= 0 && id < 65) << id;
}

TEST(Generate, BadArgumentsAreNamed) {
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));
  const Tensor prompt = Tensor::from_ints({1, 2}, {1, 2});
  EXPECT_NE(error_of([&] { m.generate(prompt, {.temperature = -1}); }).find("temperature must be >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.generate(prompt, {.top_k = -2}); }).find("top_k must be >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { m.generate(Tensor::from_ints({1, 2}, {2})); }).find("[batch, tokens]"), std::string::npos);
  EXPECT_NE(error_of([&] { m.generate(Tensor::from_ints({1, 70}, {1, 2})); }).find("id 70"), std::string::npos);
}
