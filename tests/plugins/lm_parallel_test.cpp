// Language models under HybridParallelPlugin's tensor parallelism (the conformance suite
// covers training parity, no_sync, clipping, lazy init and checkpoints across layouts): what
// the GPT-2 and LLaMA policies do to the models, the vocabulary-parallel cross entropy
// against the whole one, generation through split heads, and bad combinations refused by
// name. Runs at np 2 and 4 (tp 2, tp 2 x dp 2; tp 4 refusals at np 4).
#include <gtest/gtest.h>

#include <cmath>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/parallel/vocab_parallel.h"
#include "nn/pipeline.h"
#include "optim/sgd.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "tests/support/fixtures.h"
#include "tests/support/logical.h"

using namespace booster;

namespace {

std::shared_ptr<plugins::HybridParallelPlugin> hybrid(int tp, const std::string& extra = "") {
  auto o = plugins::HybridParallelOptions::from_config(Config::from_string(
      "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\ntp_size = " + std::to_string(tp) + "\n" + extra, "h.toml"));
  return std::make_shared<plugins::HybridParallelPlugin>(o);
}

nn::GPT2Config gpt2_tiny() {
  auto c = nn::GPT2Config::preset("gpt2-tiny");  // 32 wide, 2 heads, 2 layers, 65 tokens
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0;
  return c;
}

template <typename M>
BoostResult<M> boost(Booster& booster, std::shared_ptr<M> m) {
  return booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.1}));
}

Tensor ids(int64_t rows, int64_t t, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(rows * t));
  for (auto& id : v) id = int64_t(g.next_u64() % 65);
  return Tensor::from_ints(v, {rows, t});
}

}  // namespace

TEST(LmParallel, GPT2PolicySplitsHeadsQKVAndVocabulary) {
  manual_seed(3);
  auto model = std::make_shared<nn::GPT2LMHeadModel>(gpt2_tiny());
  manual_seed(3);
  auto ref = std::make_shared<nn::GPT2LMHeadModel>(gpt2_tiny());
  auto plugin = hybrid(2);
  Booster booster(plugin);
  auto b = boost(booster, model);
  const int tr = plugin->mesh().coordinate("tp");
  EXPECT_EQ(model->get("transformer.h.0.attn.c_attn")->type_name(), "GPT2FusedLinearConv1D_Col");
  EXPECT_EQ(model->get("transformer.h.0.attn.c_proj")->type_name(), "GPT2FusedLinearConv1D_Row");
  EXPECT_EQ(model->get("transformer.h.1.mlp.c_fc")->type_name(), "GPT2FusedLinearConv1D_Col");
  EXPECT_EQ(model->get("transformer.wte")->type_name(), "VocabParallelEmbedding1D");
  EXPECT_EQ(model->get("transformer.drop")->type_name(), "DropoutForReplicatedInput");
  EXPECT_EQ(std::get<int64_t>(model->attribute("transformer.h.0.attn.num_heads")), 1);
  // q, k and v: the same 16 of their 32 columns each, as one framed box of [32, 96].
  auto qkv = model->get_tensor("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(qkv.shape(), (Shape{32, 48}));
  EXPECT_EQ(*qkv.region(), Region::framed_box({32, 96}, {32, 3, 32}, {0, 0, 16 * tr}, {32, 3, 16}));
  // 65 tokens padded to 128 (make_vocab_size_divisible_by 64 x tp 2): 64 rows and 1.
  auto wte = model->get_tensor("transformer.wte.weight");
  EXPECT_EQ(wte.shape(), (Shape{tr == 0 ? 64 : 1, 32}));
  EXPECT_EQ(*wte.region(), Region::box({65, 32}, {64 * tr, 0}, {tr == 0 ? 64 : 1, 32}));
  // The logits stay split; the loss, logits and input gradients equal the whole model's.
  const Tensor x = ids(2, 8, 7);
  auto out = b.model(x, x);
  auto want = (*ref)(x, x);
  EXPECT_EQ(out.logits.shape(), (Shape{2, 8, tr == 0 ? 64 : 1}));
  EXPECT_NEAR(out.loss.item(), want.loss.item(), 1e-5 * std::abs(want.loss.item()));
  const Tensor cols = want.logits.narrow(-1, 64 * tr, tr == 0 ? 64 : 1).contiguous();
  auto g = out.logits.to_vector(), w = cols.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5) << i;
  out.loss.backward();
  want.loss.backward();
  for (const char* n : {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.weight"}) {
    Tensor gp = model->get_tensor(n).grad();
    Tensor gw = testkit::logical(ref->get_tensor(n).grad());
    Tensor got = testkit::logical(gp, *model->get_tensor(n).region());
    auto a = got.to_vector(), e = gw.to_vector();
    double err = 0;
    for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::abs(a[i] - e[i])));
    EXPECT_LE(err, 1e-5) << n;
  }
}

TEST(LmParallel, VocabParallelCrossEntropyEqualsTheWholeOne) {
  auto plugin = hybrid(2);
  const dist::ProcessGroup& g = plugin->mesh().group("tp");
  const int tp = g.size();
  const int64_t n = 12, v = 65;
  Tensor whole = Tensor::empty({n, v});
  Generator(9).normal_(whole);
  whole = scale(whole, 4.0);
  std::vector<int64_t> t = {0, 64, 63, -100, 5, 64, 1, 2, -100, 40, 64, 33};
  const Tensor target = Tensor::from_ints(t, {n});
  Tensor wl = whole.clone().requires_grad_(true);
  Tensor want = cross_entropy(wl, target);
  want.backward();
  for (int64_t divisible : {64, 1, 7}) {
    const auto part = nn::VocabPartition::of(v, tp, g.rank(), divisible);
    Tensor mine = whole.narrow(1, part.begin, part.size()).contiguous().requires_grad_(true);
    Tensor loss = nn::vocab_parallel_cross_entropy(mine, target, g, part);
    EXPECT_NEAR(loss.item(), want.item(), 1e-5 * want.item()) << "divisible by " << divisible;
    loss.backward();
    auto a = mine.grad().to_vector(), e = wl.grad().narrow(1, part.begin, part.size()).contiguous().to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-6) << "divisible by " << divisible << " element " << i;
    // The gathered logits are the whole ones.
    EXPECT_EQ(nn::gather_vocab(mine.detach(), g, part).to_vector(), whole.to_vector());
  }
  EXPECT_NE(testkit::error_of([&] {
              const auto part = nn::VocabPartition::of(v, tp, g.rank(), 64);
              nn::vocab_parallel_cross_entropy(whole.narrow(1, part.begin, part.size()).contiguous(),
                                               Tensor::from_ints(std::vector<int64_t>(size_t(n), 65), {n}), g, part);
            }).find("target[0] = 65 is not a token id in [0, 65)"),
            std::string::npos);
}

namespace {

// A causal LM under tp 2 with fused_linear_cross_entropy against the whole model's loss on
// its logits: the loss and every parameter's gradient (this rank's part) alike, with the
// vocabulary-split head making and consuming its logits a block of rows at a time.
template <typename M>
void expect_fused_head_matches_whole(std::shared_ptr<M> model, std::shared_ptr<M> ref, const std::string& head) {
  auto plugin = hybrid(2);
  Booster booster(plugin);
  auto b = boost(booster, model);
  model->fused_linear_cross_entropy = true;
  std::vector<int64_t> y = ids(2, 8, 5).to_int_vector();
  y[3] = -100;
  const TensorMap batch{{"input_ids", ids(2, 8, 7)}, {"labels", Tensor::from_ints(y, {2, 8})}};
  const TensorMap out = b.model.wrapper()->forward_named(batch);
  ASSERT_EQ(out.count("logits"), 0u);
  const Tensor want = ref->token_loss(nn::forward_named(*ref, batch).at("logits"), batch.at("labels"));
  EXPECT_NEAR(out.at("loss").item(), want.item(), 1e-5 * std::abs(want.item()));
  out.at("loss").backward();
  want.backward();
  EXPECT_EQ(model->get(head)->type_name().rfind("VocabParallel", 0), 0u) << model->get(head)->type_name();
  for (auto& [n, p] : ref->named_parameters()) {
    Tensor mine = model->get_tensor(n);
    const Tensor got = mine.region() ? testkit::logical(mine.grad(), *mine.region()) : mine.grad();
    EXPECT_LE(testkit::max_abs_diff(got, p.grad()), 1e-5) << n;
  }
}

}  // namespace

TEST(LmParallel, FusedHeadLossUnderVocabParallelismEqualsTheWholeModel) {
  manual_seed(3);
  auto gpt2 = std::make_shared<nn::GPT2LMHeadModel>(gpt2_tiny());
  manual_seed(3);
  expect_fused_head_matches_whole(gpt2, std::make_shared<nn::GPT2LMHeadModel>(gpt2_tiny()), "transformer.wte");
  auto c = nn::LlamaConfig::preset("llama-tiny");
  c.tie_word_embeddings = false;
  manual_seed(4);
  auto llama = std::make_shared<nn::LlamaForCausalLM>(c);
  manual_seed(4);
  expect_fused_head_matches_whole(llama, std::make_shared<nn::LlamaForCausalLM>(c), "lm_head");
}

TEST(LmParallel, LlamaPolicyDividesGroupedKeyValueHeadsAndGenerates) {
  auto c = nn::LlamaConfig::preset("llama-tiny");  // 4 heads, 2 key/value heads, untied head
  manual_seed(5);
  auto model = std::make_shared<nn::LlamaForCausalLM>(c);
  manual_seed(5);
  auto ref = std::make_shared<nn::LlamaForCausalLM>(c);
  Booster booster(hybrid(2));
  boost(booster, model);
  EXPECT_EQ(std::get<int64_t>(model->attribute("model.layers.0.self_attn.num_heads")), 2);
  EXPECT_EQ(std::get<int64_t>(model->attribute("model.layers.0.self_attn.num_key_value_heads")), 1);
  EXPECT_EQ(model->get("lm_head")->type_name(), "VocabParallelLMHead1D");
  EXPECT_EQ(model->get("model.embed_tokens")->type_name(), "VocabParallelEmbedding1D");
  // Generation gathers the split logits: the same tokens as the whole model's, greedy and sampled.
  const Tensor start = ids(1, 5, 11);
  for (double temperature : {0.0, 1.0}) {
    nn::GenerateOptions o;
    o.max_new_tokens = 12, o.temperature = temperature;
    EXPECT_EQ(model->generate(start, o).to_int_vector(), ref->generate(start, o).to_int_vector()) << temperature;
  }
}

TEST(LmParallel, BadCombinationsAreNamed) {
  auto refused = [](std::shared_ptr<plugins::HybridParallelPlugin> plugin, std::shared_ptr<nn::Module> m) {
    return testkit::error_of([&] {
      Booster booster(plugin);
      booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.1}));
    });
  };
  auto llama = [](int64_t heads, int64_t kv) {
    auto c = nn::LlamaConfig::preset("llama-tiny");
    c.num_attention_heads = heads, c.num_key_value_heads = kv, c.hidden_size = 8 * heads;
    return std::make_shared<nn::LlamaForCausalLM>(c);
  };
  std::string e = refused(hybrid(2), llama(3, 3));
  EXPECT_NE(e.find("num_attention_heads 3 does not divide by tp_size 2"), std::string::npos) << e;
  // A sequence that does not split over the sequence-parallel group, named with the group.
  {
    auto m = std::make_shared<nn::GPT2LMHeadModel>(gpt2_tiny());
    Booster booster(hybrid(2, "enable_sequence_parallelism = true\n"));
    auto b = boost(booster, m);
    const Tensor x = ids(2, 7, 1);
    e = testkit::error_of([&] { b.model(x, x); });
    EXPECT_NE(e.find("GPT2Model: a sequence of 7 tokens does not split over the sequence-parallel group of 2 ranks "
                     "(split_gather, tp_size)"), std::string::npos) << e;
  }
  e = testkit::error_of([] {
    hybrid(1, "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\nsp_size = 2\n"
              "enable_sequence_overlap = true\n");
  });
  EXPECT_NE(e.find("enable_sequence_overlap overlaps split_gather's communication with the linears (mode ring); "
                   "sequence_parallelism_mode all_to_all has no gather around the linears to overlap"),
            std::string::npos) << e;
  e = testkit::error_of([] { hybrid(2, "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\nsp_size = 2\n"); });
  EXPECT_NE(e.find("all_to_all runs on whole weights here (tp_size 1), got tp_size 2"), std::string::npos) << e;
  e = testkit::error_of([] { hybrid(1, "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\n"); });
  EXPECT_NE(e.find("set sp_size > 1, got 0"), std::string::npos) << e;
  if (dist::world_size() % 4 != 0) return;
  e = refused(hybrid(4), llama(4, 2));
  EXPECT_NE(e.find("num_key_value_heads 2 does not divide by tp_size 4"), std::string::npos) << e;
  // 65 tokens padded to 256 over 4 ranks: ranks 2 and 3 would hold only padding.
  auto c = gpt2_tiny();
  c.n_head = 4;
  e = refused(hybrid(4), std::make_shared<nn::GPT2LMHeadModel>(c));
  EXPECT_NE(e.find("leaves tensor-parallel rank 2 only padding; lower make_vocab_size_divisible_by (21 leaves every "
                   "rank a real row)"), std::string::npos) << e;
  e = refused(hybrid(4, "tp_mode = '2d'\n"), std::make_shared<nn::GPT2LMHeadModel>(c));
  EXPECT_NE(e.find("tensor parallelism of a language model is 1D"), std::string::npos) << e;
  // Ulysses scatters LLaMA's key/value heads too: 2 over 4 ranks.
  e = refused(hybrid(1, "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\nsp_size = 4\n"),
              llama(4, 2));
  EXPECT_NE(e.find("num_key_value_heads 2 does not divide by sp_size 4 (Ulysses scatters the key/value heads too)"),
            std::string::npos) << e;
}

// Sequence parallelism trains on token shards, but a model generating with a cache runs its
// layers on whole sequences (one token at a time does not split): the same tokens as the
// whole model's, under split_gather, ring (its overlapped form) and Ulysses.
TEST(LmParallel, GenerationUnderSequenceParallelism) {
  for (const char* mode : {"split_gather", "ring", "all_to_all"}) {
    const bool ulysses = std::string(mode) == "all_to_all";
    auto c = gpt2_tiny();
    manual_seed(8);
    auto model = std::make_shared<nn::GPT2LMHeadModel>(c);
    manual_seed(8);
    auto ref = std::make_shared<nn::GPT2LMHeadModel>(c);
    Booster booster(hybrid(ulysses ? 1 : 2, std::string("enable_sequence_parallelism = true\nsequence_parallelism_mode = '") +
                                                mode + "'\n" + (ulysses ? "sp_size = 2\n" : "")));
    auto b = boost(booster, model);
    EXPECT_EQ(model->get("transformer.h.0.attn")->type_name(), ulysses ? "UlyssesGPT2Attention" : "GPT2Attention") << mode;
    if (!ulysses) {
      EXPECT_EQ(model->get("transformer.h.0.ln_1")->type_name(), "SequenceParallelLayerNorm");
    }
    const Tensor x = ids(2, 8, 3);
    auto out = b.model(x, x);
    EXPECT_NEAR(out.loss.item(), (*ref)(x, x).loss.item(), 1e-5) << mode;
    nn::GenerateOptions o;
    o.max_new_tokens = 9, o.temperature = 0;
    const Tensor start = ids(1, 3, 4);
    EXPECT_EQ(model->generate(start, o).to_int_vector(), ref->generate(start, o).to_int_vector()) << mode;
  }
}
