// Module registry: walking, typed-slot replacement, state dicts, clone, freezing.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "nn/layers.h"
#include "nn/vit.h"

using namespace booster;
using namespace booster::nn;

namespace {

// A two-layer MLP whose forward calls through its slots.
class Mlp : public Module {
 public:
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<Linear>(4, 8));
    act = register_module<UnaryModule>("act", std::make_shared<GELU>());
    fc2 = register_module("fc2", std::make_shared<Linear>(8, 2));
    register_buffer("steps", Tensor::zeros({1}));
  }
  std::string type_name() const override { return "Mlp"; }
  Tensor forward(const Tensor& x) { return fc2->forward(act->forward(fc1->forward(x))); }
  Slot<Linear> fc1, fc2;
  Slot<UnaryModule> act;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<Mlp>(); }
};

// A Linear subclass that counts its calls (stands in for a tensor-parallel Linear).
class CountingLinear : public Linear {
 public:
  using Linear::Linear;
  std::string type_name() const override { return "CountingLinear"; }
  Tensor forward(const Tensor& x) override {
    ++calls;
    return Linear::forward(x);
  }
  int calls = 0;

 protected:
  std::shared_ptr<Module> fresh() const override { return std::make_shared<CountingLinear>(in_, out_, has_bias_); }
};

}  // namespace

TEST(Module, NamesWalkTheRegistry) {
  auto m = std::make_shared<Mlp>();
  std::vector<std::string> names;
  for (auto& [n, p] : m->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(m->named_buffers()[0].first, "steps");
  EXPECT_EQ(m->state_dict().size(), 5u);
  std::vector<std::string> mods;
  for (auto& [n, mm] : m->named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "fc1", "act", "fc2"}));
  EXPECT_EQ(m->get("fc2")->type_name(), "Linear");
  EXPECT_TRUE(m->get_tensor("fc1.weight").is_same(m->fc1->weight.get()));
  try {
    m->get("fc3.weight");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no child 'fc3'"), std::string::npos) << e.what();
  }
}

TEST(Module, ReplaceTakesEffectInParentForward) {
  auto m = std::make_shared<Mlp>();
  auto counting = std::make_shared<CountingLinear>(8, 2);
  m->replace("fc2", counting);
  m->forward(Tensor::ones({3, 4}));
  EXPECT_EQ(counting->calls, 1);
  EXPECT_EQ(m->fc2.get(), counting.get());
  // The new module's parameters are what the registry walks now.
  EXPECT_TRUE(m->named_parameters()[2].second.is_same(counting->weight.get()));
}

TEST(Module, ReplaceWithWrongKindIsRefused) {
  auto vit = std::make_shared<ViTForImageClassification>([] {
    ViTConfig c;
    c.hidden_size = 16, c.num_hidden_layers = 4, c.num_attention_heads = 2, c.intermediate_size = 32;
    c.image_size = 8, c.patch_size = 4, c.num_labels = 3;
    return c;
  }());
  // Slots are typed by the interface the parent calls: ViTLayer calls output(h, residual),
  // which a Linear does not offer.
  const std::string wrong = "vit.encoder.layer.3.output";
  try {
    vit->replace(wrong, std::make_shared<Linear>(32, 16));
    FAIL();
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(wrong), std::string::npos) << msg;
    EXPECT_NE(msg.find("ViTOutput"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Linear"), std::string::npos) << msg;
  }
  const std::string path = "vit.encoder.layer.3.intermediate.dense";
  auto counting = std::make_shared<CountingLinear>(16, 32);
  vit->replace(path, counting);
  vit->forward(Tensor::zeros({1, 3, 8, 8}));
  EXPECT_EQ(counting->calls, 1);
}

TEST(Module, LoadStateDictReportsByName) {
  auto a = std::make_shared<Mlp>(), b = std::make_shared<Mlp>();
  EXPECT_TRUE(b->load_state_dict(a->state_dict()).ok());
  EXPECT_EQ(b->fc1->weight->to_vector(), a->fc1->weight->to_vector());
  StateDict sd = a->state_dict();
  sd.erase(sd.begin());                                 // drop fc1.weight
  sd.emplace_back("fc3.bias", Tensor::zeros({2}));      // unexpected
  sd[1].second = Tensor::zeros({3, 8});                 // fc2.weight wrong shape
  try {
    b->load_state_dict(sd);
    FAIL();
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing keys (1):\n    fc1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc3.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc2.weight: checkpoint [3, 8] vs model [2, 8]"), std::string::npos) << msg;
  }
  LoadResult r = b->load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"fc1.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"fc3.bias"}));
  EXPECT_EQ(r.mismatched.size(), 1u);
  EXPECT_EQ(b->fc1->bias->to_vector(), a->fc1->bias->to_vector());  // the rest loaded
}

TEST(Module, CloneIsDeepAndKeepsReplacedChildren) {
  auto m = std::make_shared<Mlp>();
  m->replace("fc2", std::make_shared<CountingLinear>(8, 2));
  auto c = std::static_pointer_cast<Mlp>(m->clone());
  EXPECT_EQ(c->fc2->type_name(), "CountingLinear");
  EXPECT_FALSE(c->fc1->weight->shares_storage(m->fc1->weight.get()));
  EXPECT_EQ(c->fc1->weight->to_vector(), m->fc1->weight->to_vector());
  EXPECT_TRUE(c->fc1->weight->requires_grad());
  NoGradGuard ng;
  Tensor w = c->fc1->weight;
  w.fill_(0);
  EXPECT_NE(m->fc1->weight->to_vector()[0], 0.f);
}

TEST(Module, FrozenParametersGetNoGradient) {
  auto m = std::make_shared<Mlp>();
  m->fc1->requires_grad_(false);
  sum(m->forward(Tensor::ones({2, 4}))).backward();
  EXPECT_FALSE(m->fc1->weight->grad().defined());
  EXPECT_TRUE(m->fc2->weight->grad().defined());
  m->zero_grad();
  EXPECT_FALSE(m->fc2->weight->grad().defined());
}

TEST(Module, TrainEvalReachesEveryDescendant) {
  auto m = std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
      std::make_shared<Linear>(4, 4), std::make_shared<Dropout>(0.9)});
  m->eval();
  EXPECT_FALSE(m->get("1")->is_training());
  Tensor x = Tensor::ones({2, 4});
  EXPECT_EQ(m->forward(x).to_vector(), (*m)[0].forward(x).to_vector());  // no dropout in eval
  m->train();
  EXPECT_TRUE(m->get("1")->is_training());
}

TEST(Module, ParameterHandleSurvivesReshard) {
  auto lin = std::make_shared<Linear>(4, 6);
  Tensor held = lin->weight;  // e.g. an optimizer's handle, taken before a plugin reshards
  {
    NoGradGuard ng;
    held.set_data(lin->weight->detach().narrow(0, 0, 3).contiguous());  // keep rows 0..2
  }
  EXPECT_EQ(lin->weight->shape(), (Shape{3, 4}));
  EXPECT_TRUE(lin->named_parameters()[0].second.is_same(held));
}
