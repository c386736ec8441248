// The ring modes of sequence parallelism. The ring linears (sequence_parallelism_mode ring,
// split_gather overlapped) against split_gather's collectives, values and gradients, for
// Linear's [out, in] weights and GPT-2's Conv1D [in, out] ones. Ring attention
// (sequence_parallelism_mode ring_attn): the op on a zigzag split against
// causal attention over the whole sequence, values and gradients (which come back to their
// owners round the ring), and with attention dropout against a masked composite; GPT-2 and LLaMA (grouped key/value heads, rotary embeddings at each
// chunk's positions) under HybridParallelPlugin against the whole model, and generation;
// bad combinations refused by name. Runs at np 2 and 4 (sp over every rank).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "core/dist/functional.h"
#include "nn/parallel/linear_1d.h"
#include "nn/parallel/ring_attention.h"
#include "nn/parallel/ring_linear.h"
#include "nn/vit.h"
#include "optim/sgd.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"
#include "tests/support/fixtures.h"

using namespace booster;

namespace {

std::shared_ptr<plugins::HybridParallelPlugin> ring(int sp, int tp = 1) {
  auto o = plugins::HybridParallelOptions::from_config(
      Config::from_string("[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\ntp_size = " + std::to_string(tp) + "\n"
                          "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'ring_attn'\nsp_size = " +
                              std::to_string(sp) + "\n",
                          "h.toml"));
  return std::make_shared<plugins::HybridParallelPlugin>(o);
}

Tensor ids(int64_t rows, int64_t t, uint64_t seed, int64_t vocab) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(rows * t));
  for (auto& id : v) id = int64_t(g.next_u64() % uint64_t(vocab));
  return Tensor::from_ints(v, {rows, t});
}

// This rank's zigzag rows of x [B, h, T, d]: chunks r and 2n - 1 - r of 2n.
Tensor zigzag_rows(const Tensor& x, int r, int n) {
  const int64_t c = x.size(2) / (2 * n);
  return concat({x.narrow(2, r * c, c), x.narrow(2, (2 * n - 1 - r) * c, c)}, 2);
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  auto x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol) << what << " element " << i;
}

}  // namespace

// The ring linears against split_gather's: the column one against sequence_gathered_linear
// (all-gather, one product, reduce-scatter in backward), the row one against a product and
// reducescatter_forward_gather_backward; every rank's shard and gradients.
TEST(RingLinear, EqualsSplitGatherWithGradients) {
  auto& world = dist::ProcessGroup::world();
  const int n = world.size();
  for (bool in_out : {false, true}) {
    const std::string tag = in_out ? "Conv1D weights: " : "Linear weights: ";
    Generator g(40 + uint64_t(dist::world_rank()));
    auto leaf = [&](const Shape& s) {
      Tensor x = Tensor::empty(s);
      g.normal_(x);
      return std::pair<Tensor, Tensor>{x.clone().requires_grad_(), x.clone().requires_grad_()};
    };
    const int64_t t = 3, in = 8, out = 6;
    auto [x1, x2] = leaf({2, t, in});
    auto [w1, w2] = leaf(in_out ? Shape{in, out} : Shape{out, in});
    auto [b1, b2] = leaf({out});
    Tensor y1 = nn::ring_gathered_linear(x1, w1, b1, world, in_out);
    Tensor y2 = nn::sequence_gathered_linear(x2, w2, b2, world, 1, in_out);
    expect_close(y1, y2, 1e-5, tag + "column output");
    auto [r1, r2] = leaf({2, t * n, in});  // the row linear's input: every token, this rank's features
    Tensor z1 = nn::ring_scattered_linear(r1, w1, world, in_out);
    const Tensor full = matmul(r2.reshape({-1, in}), in_out ? w2 : w2.transpose(0, 1)).view({2, t * n, out});
    Tensor z2 = dist::reducescatter_forward_gather_backward(full, 1, world);
    expect_close(z1, z2, 1e-5, tag + "row output");
    Tensor dy = Tensor::empty(y1.shape()), dz = Tensor::empty(z1.shape());
    g.normal_(dy);
    g.normal_(dz);
    add(sum(mul(y1, dy)), sum(mul(z1, dz))).backward();
    add(sum(mul(y2, dy)), sum(mul(z2, dz))).backward();
    expect_close(x1.grad(), x2.grad(), 1e-4, tag + "column dx");
    expect_close(w1.grad(), w2.grad(), 1e-4, tag + "dw");
    expect_close(b1.grad(), b2.grad(), 1e-4, tag + "column db");
    expect_close(r1.grad(), r2.grad(), 1e-4, tag + "row dx");
  }
}

// The op itself: every rank builds the same whole q, k, v; causal attention over them is the
// oracle; ring attention on this rank's zigzag rows gives those rows of its context and of the
// three gradients (k's and v's summed over every rank's queries, round the ring).
TEST(RingAttention, EqualsCausalAttentionOnItsRows) {
  auto& world = dist::ProcessGroup::world();
  const int n = world.size(), r = world.rank();
  for (int64_t chunk : {3, 37}) {  // 37: blocks past the kernels' 16-wide tiles and 48-row blocks
    const int64_t t = 2 * n * chunk;
    Generator g(21);
    std::vector<Tensor> whole, mine;
    for (int i = 0; i < 3; ++i) {
      Tensor x = Tensor::empty({2, 3, t, 8});
      g.normal_(x);
      whole.push_back(x.clone().requires_grad_());
      mine.push_back(zigzag_rows(x, r, n).contiguous().requires_grad_());
    }
    Tensor w = Tensor::empty({2, 3, t, 8});
    g.normal_(w);
    Tensor ref = causal_attention(whole[0], whole[1], whole[2]);
    sum(mul(ref, w)).backward();
    Tensor out = nn::ring_attention(mine[0], mine[1], mine[2], world, 1.0 / std::sqrt(8.0));
    sum(mul(out, zigzag_rows(w, r, n))).backward();
    const std::string tag = "T " + std::to_string(t) + ": ";
    expect_close(out, zigzag_rows(ref, r, n), 2e-5, tag + "context");
    expect_close(mine[0].grad(), zigzag_rows(whole[0].grad(), r, n), 5e-5, tag + "dq");
    expect_close(mine[1].grad(), zigzag_rows(whole[1].grad(), r, n), 5e-5, tag + "dk");
    expect_close(mine[2].grad(), zigzag_rows(whole[2].grad(), r, n), 5e-5, tag + "dv");
  }
}

// Attention dropout in the ring: the composite oracle draws the same masks (the counter of head
// bh, local row i, the key at local index j of rank src: (bh t + i) n t + src t + j, from the
// generator keyed by the call's one draw of the default generator) over the whole sequence,
// softmax before the mask; its k and v gradients, summed over the ranks' rows, are the ring's.
TEST(RingAttention, DropoutMatchesAMaskedComposite) {
  auto& world = dist::ProcessGroup::world();
  const int n = world.size(), r = world.rank();
  const int64_t c = 5, t = 2 * c, T = 2 * n * c, B = 1, H = 2, d = 8;
  const double p = 0.3, alpha = 1.0 / std::sqrt(double(d));
  Generator g(31);
  std::vector<Tensor> whole, mine;
  for (int i = 0; i < 3; ++i) {
    Tensor x = Tensor::empty({B, H, T, d});
    g.normal_(x);
    whole.push_back(x.clone().requires_grad_());
    mine.push_back(zigzag_rows(x, r, n).contiguous().requires_grad_());
  }
  Tensor w = Tensor::empty({B, H, t, d});
  g.normal_(w);
  manual_seed(77, uint64_t(r));
  const uint64_t seed = default_generator().next_u64();
  manual_seed(77, uint64_t(r));
  Tensor out = nn::ring_attention(mine[0], mine[1], mine[2], world, alpha, p);
  sum(mul(out, w)).backward();
  // The oracle: this rank's rows (global positions pos[i]) over every key, causal, masked.
  auto position = [&](int rank, int64_t i) { return i < c ? rank * c + i : (2 * n - 1 - rank) * c + (i - c); };
  std::vector<float> bias(size_t(B * H * t * T)), keep(bias.size());
  const Generator masks(seed);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < t; ++i)
      for (int src = 0; src < n; ++src)
        for (int64_t j = 0; j < t; ++j) {
          const int64_t key = position(src, j), at = (bh * t + i) * T + key;
          bias[size_t(at)] = key > position(r, i) ? -INFINITY : 0.0f;
          const uint64_t counter = uint64_t((bh * t + i) * (n * t) + src * t + j);
          keep[size_t(at)] = double(masks.at(counter) >> 11) * 0x1.0p-53 < p ? 0.0f : float(1.0 / (1.0 - p));
        }
  Tensor q_rows = zigzag_rows(whole[0], r, n);
  Tensor probs = softmax(add(scale(matmul(q_rows, whole[1].transpose(-1, -2)), alpha), Tensor::from_vector(bias, {B, H, t, T})));
  Tensor ref = matmul(mul(probs, Tensor::from_vector(keep, {B, H, t, T})), whole[2]);
  sum(mul(ref, w)).backward();
  expect_close(out, ref, 2e-5, "context");
  expect_close(mine[0].grad(), zigzag_rows(whole[0].grad(), r, n), 5e-5, "dq");
  for (int i = 1; i < 3; ++i) {
    Tensor summed = whole[i].grad().contiguous();
    dist::all_reduce(summed);
    expect_close(mine[i].grad(), zigzag_rows(summed, r, n), 5e-5, i == 1 ? "dk" : "dv");
  }
}

namespace {

// The model on zigzag shards against the same model whole: the loss, greedy generation, and
// one SGD step over the gradients the step synchronizes over dp x sp (w - 0.1 g).
template <typename M, typename C>
void expect_whole_model(const C& config, const std::string& attn_path, const char* attn_type) {
  const int n = dist::world_size();
  manual_seed(6);
  auto model = std::make_shared<M>(config);
  manual_seed(6);
  auto ref = std::make_shared<M>(config);
  Booster booster(ring(n));
  auto b = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1}));
  EXPECT_EQ(model->get(attn_path)->type_name(), attn_type);
  const Tensor x = ids(2, 4 * n * 3, 5, config.vocab_size);
  auto out = b.model(x, x);
  auto whole = (*ref)(x, x);
  EXPECT_NEAR(out.loss.item(), whole.loss.item(), 1e-5) << attn_type;
  nn::GenerateOptions o;
  o.max_new_tokens = 7, o.temperature = 0;
  const Tensor start = ids(1, 3, 4, config.vocab_size);
  EXPECT_EQ(model->generate(start, o).to_int_vector(), ref->generate(start, o).to_int_vector()) << attn_type;
  booster.backward(out.loss, *b.optimizer);
  whole.loss.backward();
  b.optimizer->step();
  std::map<std::string, Tensor> after;
  for (auto& [name, p] : model->named_parameters()) after[name] = p.detach();
  for (auto& [name, p] : ref->named_parameters())
    expect_close(after.at(name), sub(p.detach(), scale(p.grad(), 0.1)), 2e-5, std::string(attn_type) + " " + name);
}

}  // namespace

// GPT-2, and LLaMA (4 heads over 2 key/value heads, rotary embeddings at each chunk's positions).
TEST(RingAttention, LanguageModelsEqualTheWholeModel) {
  auto gpt2 = nn::GPT2Config::preset("gpt2-tiny");
  gpt2.resid_pdrop = gpt2.embd_pdrop = gpt2.attn_pdrop = 0;
  expect_whole_model<nn::GPT2LMHeadModel>(gpt2, "transformer.h.0.attn", "RingGPT2Attention");
  expect_whole_model<nn::LlamaForCausalLM>(nn::LlamaConfig::preset("llama-tiny"), "model.layers.0.self_attn",
                                           "RingLlamaAttention");
}

TEST(RingAttention, BadCombinationsAreNamed) {
  const int n = dist::world_size();
  auto gpt2 = nn::GPT2Config::preset("gpt2-tiny");
  gpt2.resid_pdrop = gpt2.embd_pdrop = gpt2.attn_pdrop = 0;
  // A sequence that does not cut into 2 x sp equal chunks.
  {
    auto m = std::make_shared<nn::GPT2LMHeadModel>(gpt2);
    Booster booster(ring(n));
    auto b = booster.boost(m, std::make_shared<optim::SGD>(m->named_parameters(), optim::SGDOptions{0.1}));
    const Tensor x = ids(2, 2 * n + 1, 1, 65);
    const std::string e = testkit::error_of([&] { b.model(x, x); });
    EXPECT_NE(e.find("ring_attn cuts the sequence into 2 x sp_size = " + std::to_string(2 * n) + " equal chunks; a "
                     "sequence of " + std::to_string(2 * n + 1) + " tokens does not"),
              std::string::npos) << e;
  }
  std::string e = testkit::error_of([] { ring(2, 2); });
  EXPECT_NE(e.find("ring_attn runs on whole weights here (tp_size 1), got tp_size 2"), std::string::npos) << e;
  e = testkit::error_of([] { ring(0); });
  EXPECT_NE(e.find("ring_attn (ring attention) splits the sequence over sp_size ranks; set sp_size > 1, got 0"),
            std::string::npos) << e;
  // The ViT's tokens attend both ways: ring_attn is for causal language models.
  e = testkit::error_of([&] {
    auto vit = std::make_shared<nn::ViTForImageClassification>(testkit::tiny_vit(1));
    Booster booster(ring(n));
    booster.boost(vit, std::make_shared<optim::SGD>(vit->named_parameters(), optim::SGDOptions{0.1}));
  });
  EXPECT_NE(e.find("ring_attn is ring attention for causal language models"), std::string::npos) << e;
}
