// The seams parallel plugins use, on the ViT: a replacement at any depth takes effect (a
// self-attention, a dropout, a whole encoder layer), layers adopt existing parameter
// handles, a policy changes attributes by name, and module hooks fire before and after a
// forward and when backward reaches a module (each removed by its handle).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "nn/vit.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;

namespace {

ViTConfig small_config() { return booster::testkit::tiny_vit(3); }

std::shared_ptr<ViTForImageClassification> model(uint64_t seed = 3) {
  manual_seed(seed);
  return std::make_shared<ViTForImageClassification>(small_config());
}

Tensor pixels() {
  Tensor x = Tensor::empty({2, 3, 8, 8});
  Generator(11).normal_(x);
  return x;
}

// Wraps another unary module, counting calls and scaling its output (so its effect shows).
class Probe : public UnaryModule {
 public:
  Probe(std::shared_ptr<UnaryModule> inner, double factor) : factor_(factor) { inner_ = register_module("inner", inner); }
  std::string type_name() const override { return "Probe"; }
  Tensor forward(const Tensor& x) override {
    ++calls;
    return scale(inner_(x), factor_);
  }
  int calls = 0;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Probe>(std::static_pointer_cast<UnaryModule>(inner_.shared()), factor_); }
  Slot<UnaryModule> inner_;
  double factor_;
};

}  // namespace

TEST(Seams, ReplacingAtAnyDepthTakesEffect) {
  auto m = model();
  const Tensor x = pixels();
  const auto base = m->forward(x).logits.to_vector();
  // A whole self-attention (what Colossal-AI's ViT policy replaces).
  const std::string attn = "vit.encoder.layer.1.attention.attention";
  auto probe_attn = std::make_shared<Probe>(std::dynamic_pointer_cast<UnaryModule>(m->get(attn)), 0.5);
  m->replace(attn, probe_attn);
  const auto with_attn = m->forward(x).logits.to_vector();
  EXPECT_EQ(probe_attn->calls, 1);
  EXPECT_NE(with_attn, base);
  // The attention-probabilities dropout: a replacement runs on the probabilities.
  const std::string drop = "vit.encoder.layer.0.attention.attention.dropout";
  auto probe_drop = std::make_shared<Probe>(std::make_shared<Identity>(), 0.0);  // drops everything
  m->replace(drop, probe_drop);
  m->forward(x);
  EXPECT_EQ(probe_drop->calls, 1);
  // A whole encoder layer.
  const std::string layer = "vit.encoder.layer.2";
  auto probe_layer = std::make_shared<Probe>(std::dynamic_pointer_cast<UnaryModule>(m->get(layer)), 1.0);
  m->replace(layer, probe_layer);
  m->forward(x);
  EXPECT_EQ(probe_layer->calls, 1);
  // Their parameters are what the registry walks now, under names one level deeper.
  EXPECT_NO_THROW(m->get_tensor("vit.encoder.layer.2.inner.output.dense.weight"));
}

TEST(Seams, ZeroedAttentionProbabilitiesZeroTheContext) {
  // The dropout slot is really on the probabilities: multiplying them by 0 zeroes the
  // context the self-attention returns.
  auto m = model();
  auto& sa = dynamic_cast<ViTSelfAttention&>(*m->get("vit.encoder.layer.0.attention.attention"));
  m->replace("vit.encoder.layer.0.attention.attention.dropout", std::make_shared<Probe>(std::make_shared<Identity>(), 0.0));
  Tensor h = Tensor::empty({2, 5, 16});
  Generator(4).normal_(h);
  EXPECT_EQ(sa.forward(h).to_vector(), std::vector<float>(size_t(2 * 5 * 16), 0.0f));
}

TEST(Seams, LinearAdoptsParameterHandles) {
  auto m = model();
  const std::string path = "vit.encoder.layer.0.intermediate.dense";
  Tensor w = m->get_tensor(path + ".weight"), b = m->get_tensor(path + ".bias");
  auto adopted = std::make_shared<Linear>(w, b);
  EXPECT_TRUE(adopted->weight.get().is_same(w));  // the same handle, not a copy
  EXPECT_EQ(adopted->in_features(), 16);
  EXPECT_EQ(adopted->out_features(), 32);
  const auto before = m->forward(pixels()).logits.to_vector();
  m->replace(path, adopted);
  EXPECT_EQ(m->forward(pixels()).logits.to_vector(), before);
  EXPECT_TRUE(m->get_tensor(path + ".weight").is_same(w));
  EXPECT_THROW(Linear(Tensor::zeros({4}), Tensor()), ShapeError);
  EXPECT_THROW(Linear(Tensor::zeros({4, 3}), Tensor::zeros({3})), ShapeError);
}

TEST(Seams, PoliciesSetAttributesByName) {
  auto m = model();
  const std::string sa = "vit.encoder.layer.0.attention.attention";
  EXPECT_EQ(std::get<int64_t>(m->attribute(sa + ".num_attention_heads")), 2);
  EXPECT_EQ(std::get<int64_t>(m->attribute(sa + ".all_head_size")), 16);
  m->set_attribute(sa + ".num_attention_heads", int64_t(1));
  try {
    m->forward(pixels());  // the projections still give 2 heads' features
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 1"), std::string::npos) << e.what();
  }
  // Heads and all_head_size halved together with the projections: a rank's share.
  m->set_attribute(sa + ".all_head_size", int64_t(8));
  for (const char* p : {"query", "key", "value"}) {
    auto lin = std::dynamic_pointer_cast<Linear>(m->get(sa + "." + p));
    Tensor w = lin->weight, b = lin->bias;
    w.set_data(w.detach().narrow(0, 0, 8).contiguous());
    b.set_data(b.detach().narrow(0, 0, 8).contiguous());
    m->replace(sa + "." + std::string(p), std::make_shared<Linear>(w, b));
  }
  Tensor h = Tensor::zeros({1, 5, 16});
  EXPECT_EQ(m->get(sa)->type_name(), "ViTSelfAttention");
  EXPECT_EQ(dynamic_cast<ViTSelfAttention&>(*m->get(sa)).forward(h).shape(), (Shape{1, 5, 8}));
  EXPECT_THROW(m->set_attribute(sa + ".num_attention_heads", 2.0), ValueError);     // wrong type
  EXPECT_THROW(m->set_attribute(sa + ".num_heads", int64_t(1)), ValueError);        // no such attribute
  // A clone keeps the changed attributes.
  auto c = m->clone();
  EXPECT_EQ(std::get<int64_t>(c->attribute(sa + ".all_head_size")), 8);
}

TEST(Seams, ForwardAndBackwardHooksFireInOrderAndAreRemoved) {
  auto m = model();
  std::vector<std::string> events;
  auto layer = m->get("vit.encoder.layer.1");
  auto mlp = m->get("vit.encoder.layer.1.intermediate.dense");
  Tensor w = m->get_tensor("vit.encoder.layer.1.intermediate.dense.weight");
  auto h1 = layer->register_forward_pre_hook([&](Module&) { events.push_back("layer pre"); });
  auto h2 = layer->register_forward_hook([&](Module&) { events.push_back("layer post"); });
  auto h3 = mlp->register_forward_pre_hook([&](Module& mod) { events.push_back("dense pre " + mod.type_name()); });
  // When backward reaches the dense layer, its weight has no gradient yet: a plugin can
  // gather the parameters there, before they are used.
  auto h4 = mlp->register_backward_pre_hook([&](Module&) {
    events.push_back(std::string("dense backward, weight grad ") + (w.grad().defined() ? "set" : "unset"));
  });
  auto h5 = w.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("weight grad ready"); });
  const Tensor x = pixels();
  Tensor loss = m->forward(x, Tensor::from_ints({0, 1}, {2})).loss;
  EXPECT_EQ(events, (std::vector<std::string>{"layer pre", "dense pre Linear", "layer post"}));
  events.clear();
  loss.backward();
  EXPECT_EQ(events, (std::vector<std::string>{"dense backward, weight grad unset", "weight grad ready"}));
  // Removed hooks are gone; the others stay.
  h1.remove();
  h4.remove();
  events.clear();
  m->zero_grad();
  m->forward(x, Tensor::from_ints({0, 1}, {2})).loss.backward();
  EXPECT_EQ(events, (std::vector<std::string>{"dense pre Linear", "layer post", "weight grad ready"}));
  // A module's hooks go with their handles' scope, and no-grad forwards record no backward hook.
  {
    auto scoped = layer->register_backward_pre_hook([&](Module&) { events.push_back("scoped"); });
    NoGradGuard ng;
    m->forward(x);
  }
  events.clear();
  m->forward(x, Tensor::from_ints({0, 1}, {2})).loss.backward();
  EXPECT_EQ(std::count(events.begin(), events.end(), "scoped"), 0);
}

namespace {
// Nodes in the backward graph below t named "linear" with three outputs (stacked q, k, v).
int stacked_projection_nodes(const Tensor& t) {
  std::vector<autograd::Node*> todo{t.grad_fn().get()}, seen;
  int n = 0;
  while (!todo.empty()) {
    autograd::Node* node = todo.back();
    todo.pop_back();
    if (!node || std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    seen.push_back(node);
    n += node->name() == "linear" && node->num_outputs == 3;
    for (const auto& e : node->next_edges) todo.push_back(e.fn.get());
  }
  return n;
}
}  // namespace

// Stock query/key/value Linears run as one stacked product; a hook on one of them (ZeRO-3
// gathers its parameters so) or a replaced one puts that layer back on the three slots,
// which the hook sees. The loss and every gradient agree either way.
TEST(Seams, StockProjectionsStackAndHookedOnesRunThroughTheirSlots) {
  auto stock = model(), hooked = model();
  int fired = 0;
  auto h = hooked->get("vit.encoder.layer.0.attention.attention.key")->register_forward_pre_hook([&](Module&) {
    ++fired;
  });
  const Tensor x = pixels(), labels = Tensor::from_ints({0, 1}, {2});
  Tensor a = stock->forward(x, labels).loss, b = hooked->forward(x, labels).loss;
  const int layers = int(small_config().num_hidden_layers);
  EXPECT_EQ(stacked_projection_nodes(a), layers);
  EXPECT_EQ(stacked_projection_nodes(b), layers - 1);  // all but layer 0
  EXPECT_EQ(fired, 1);
  EXPECT_NEAR(a.item(), b.item(), 1e-5);
  a.backward();
  b.backward();
  auto pa = stock->named_parameters(), pb = hooked->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    auto ga = pa[i].second.grad().to_vector(), gb = pb[i].second.grad().to_vector();
    ASSERT_EQ(ga.size(), gb.size()) << pa[i].first;
    for (size_t j = 0; j < ga.size(); ++j) ASSERT_NEAR(ga[j], gb[j], 1e-5) << pa[i].first << " element " << j;
  }
  // A replaced projection: its layer runs the slots.
  stock->replace("vit.encoder.layer.1.attention.attention.value",
                 std::make_shared<Probe>(std::static_pointer_cast<UnaryModule>(
                                             stock->get("vit.encoder.layer.1.attention.attention.value")),
                                         1.0));
  EXPECT_EQ(stacked_projection_nodes(stock->forward(x, labels).loss), layers - 1);
}

TEST(Seams, ViTRunsAsPipelineStages) {
  for (int stages : {1, 2, 3}) {
    auto full = model(5), staged = model(5);
    const Tensor x = pixels();
    const Tensor y = Tensor::from_ints({2, 0}, {2});
    Tensor want = full->forward(x).logits;
    cross_entropy(want, y).backward();
    // Layers 3 over `stages` stages, each stage a separate call on what the last one sent.
    const int64_t L = staged->num_pipeline_layers();
    ASSERT_EQ(L, 3);
    TensorMap msg{{"pixel_values", x}};
    std::vector<std::string> held;
    for (int s = 0; s < stages; ++s) {
      StageSpec spec{L * s / stages, L * (s + 1) / stages, s == 0, s == stages - 1};
      msg = staged->stage_forward(msg, spec);
      for (auto& n : staged->stage_modules(spec)) held.push_back(n);
    }
    ASSERT_TRUE(msg.count("logits"));
    EXPECT_EQ(msg.at("logits").to_vector(), want.to_vector()) << stages << " stages";
    cross_entropy(msg.at("logits"), y).backward();
    for (auto& [n, p] : full->named_parameters())
      EXPECT_EQ(staged->get_tensor(n).grad().to_vector(), p.grad().to_vector()) << n << " with " << stages << " stages";
    // Together the stages hold every module with parameters exactly once.
    std::sort(held.begin(), held.end());
    EXPECT_EQ(std::adjacent_find(held.begin(), held.end()), held.end());
    EXPECT_EQ(held.size(), size_t(L + 3));  // embeddings, the layers, the final norm, the classifier
  }
  auto m = model();
  try {
    m->stage_forward({{"images", pixels()}}, StageSpec{0, 1, true, false});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'pixel_values'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("images"), std::string::npos) << e.what();
  }
}

TEST(Seams, SequentialRunsAsPipelineStages) {
  manual_seed(8);
  Sequential seq({std::make_shared<Linear>(4, 6), std::make_shared<GELU>(), std::make_shared<Linear>(6, 6),
                  std::make_shared<GELU>(), std::make_shared<Linear>(6, 2)});
  Tensor x = Tensor::empty({3, 4});
  Generator(2).normal_(x);
  const auto want = seq.forward(x).to_vector();
  TensorMap msg{{"input", x}};
  msg = seq.stage_forward(msg, {0, 2, true, false});
  EXPECT_TRUE(msg.count("hidden_states"));
  msg = seq.stage_forward(msg, {2, 5, false, true});
  EXPECT_EQ(msg.at("output").to_vector(), want);
  EXPECT_EQ(seq.stage_modules({2, 5, false, true}), (std::vector<std::string>{"2", "3", "4"}));
  EXPECT_THROW(seq.stage_forward(msg, {3, 6, false, true}), ValueError);
}
