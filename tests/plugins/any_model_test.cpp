// Models that are not a ViT, through the same Trainer under every plugin: an MLP written as
// an nn::MapModule (forward on the batch's named tensors) on Fashion-MNIST's images, and a
// tiny token model (an nn::Sequential of Embedding, Linear, GELU, Linear reading
// "input_ids" and returning "logits") and a tiny GPT-2 (its head tied to its embeddings) on a
// token stream of tinyshakespeare's characters.
// Each plugin's run of K steps on per-replica batches must give one process's weights and
// losses on the global batches, as the conformance suite asks of the ViT. Runs under
// mpirun -np 1, 2 and 4.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "booster/trainer/hooks.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "data/idx.h"
#include "data/token_stream.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "plugins/registry.h"
#include "tests/plugins/vit_cases.h"
#include "tests/support/logical.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

// An MLP on images, as a user would write one: any module whose forward takes the batch.
class ImageMLP : public nn::MapModule {
 public:
  ImageMLP(int64_t pixels, int64_t hidden, int64_t classes) : pixels_(pixels), hidden_(hidden), classes_(classes) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(pixels, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, classes));
  }
  std::string type_name() const override { return "ImageMLP"; }
  TensorMap forward(const TensorMap& batch) override {
    const Tensor& x = nn::need(batch, "pixel_values", "ImageMLP");
    return {{"logits", fc2(gelu(fc1(x.reshape({x.size(0), pixels_}))))}};
  }
  nn::Slot<nn::Linear> fc1, fc2;

 protected:
  std::shared_ptr<nn::Module> fresh() const override { return std::make_shared<ImageMLP>(pixels_, hidden_, classes_); }
  int64_t pixels_, hidden_, classes_;
};

constexpr int64_t kVocab = 65, kBlock = 8;  // tinyshakespeare's 65 characters

std::shared_ptr<nn::GPT2LMHeadModel> gpt2_tiny() {
  manual_seed(9);
  nn::GPT2Config c = nn::GPT2Config::preset("gpt2-tiny");  // vocabulary 65, 2 blocks of 32, tied head
  return std::make_shared<nn::GPT2LMHeadModel>(c);
}

std::shared_ptr<nn::LlamaForCausalLM> llama_tiny() {
  manual_seed(10);
  return std::make_shared<nn::LlamaForCausalLM>(nn::LlamaConfig::preset("llama-tiny"));  // untied, 4 heads on 2 kv heads
}

std::shared_ptr<nn::Sequential> token_model() {
  return std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::UnaryModule>>{std::make_shared<nn::Embedding>(kVocab, 16),
                                                    std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::GELU>(),
                                                    std::make_shared<nn::Linear>(32, kVocab)},
      nn::SequentialKeys{"input_ids", "logits"});
}

// Mean cross entropy over every token: logits [B, T, V], labels [B, T].
Criterion token_ce() {
  return [](const Tensor& logits, const Tensor& labels) {
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}));
  };
}
Criterion image_ce() {
  return [](const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); };
}

struct Case {
  std::string name, toml;
  bool pipeline = false;  // needs an nn::PipelineModule
  int ranks = 1;          // the world must be a multiple of this
};

const std::string kGalvatron = "[plugin]\nname = 'galvatron'\nmixed_precision = 'fp32'\n";
const std::vector<Case> kCases = {
    {"torch_ddp", "[plugin]\nname = 'torch_ddp'\n"},
    {"zero1", "[plugin]\nname = 'low_level_zero'\nstage = 1\nprecision = 'fp32'\n"},
    {"zero2", "[plugin]\nname = 'low_level_zero'\nstage = 2\nprecision = 'fp32'\n"},
    {"gemini", "[plugin]\nname = 'gemini'\nprecision = 'fp32'\nmin_chunk_size_m = 0.002\nsearch_range_m = 0.004\n"},
    {"fsdp_full_shard", "[plugin]\nname = 'torch_fsdp'\nauto_wrap_policy = 'size_based'\nmin_num_params = 500\n"},
    {"hybrid_parallel_dp", "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\nzero_stage = 1\n"},
    {"hybrid_parallel_pp2", "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\npp_size = 2\nnum_microbatches = 2\n",
     true, 2},
    {"galvatron_ddp", kGalvatron, true},
    {"galvatron_sdp", kGalvatron + "sdp = true\n", true},
};

std::shared_ptr<Plugin> plugin_of(const Case& c) {
  return c.toml.empty() ? nullptr : plugins::make_plugin(Config::from_string(c.toml, c.name + ".toml"));
}

// K optimizer steps of the Trainer over `dataset` at `rows` rows a replica; returns the
// train loss of each step (the global batch's mean) and the model's logical parameters.
struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

template <typename M>
Trained train(std::shared_ptr<Plugin> plugin, std::shared_ptr<M> model, Criterion criterion,
              std::shared_ptr<const data::Dataset> dataset, int64_t rows, int steps) {
  std::vector<std::string> names;  // before boost: a pipeline stage keeps only its layers
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  Booster booster(plugin);
  auto opt = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, 0.9});
  data::DataLoaderOptions lo;
  lo.batch_size = rows;
  lo.drop_last = true;
  auto loader = plugin ? plugin->prepare_dataloader(dataset, lo) : std::make_shared<data::DataLoader>(dataset, lo);
  auto r = booster.boost(model, opt, criterion, loader);
  // Records the train loss of every step, as LossHook reports it.
  struct StepLosses : BaseHook {
    std::vector<double>* out;
    explicit StepLosses(std::vector<double>* o) : BaseHook(10), out(o) {}
    void after_train_iter(Trainer& t, const IterationOutput&) override {
      out->push_back(t.metric(Mode::train, "Loss").last_step_value());
    }
  };
  Trained got;
  Trainer trainer(booster, r.model, r.optimizer, r.criterion);
  trainer.fit({.train_dataloader = r.dataloader,
               .max_steps = steps,
               .hooks = {std::make_shared<LossHook>(), std::make_shared<PerplexityHook>(),
                         std::make_shared<StepLosses>(&got.losses)}});
  const ShardedState state = r.model->checkpoint_state();
  for (auto& name : names) got.params[name] = testkit::logical_state(state, name).to_vector();
  return got;
}

void expect_same_training(const Trained& got, const Trained& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << ": loss of step " << s;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (auto& [name, w] : want.params) {
    const auto& g = got.params.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < w.size(); ++i) scale = std::max(scale, double(std::abs(w[i]))), err = std::max(err, double(std::abs(g[i] - w[i])));
    EXPECT_LE(err, 2e-5 * scale) << what << ": parameter " << name << " differs by " << err;
  }
}

std::shared_ptr<const data::Dataset> fashion_images(size_t limit) {
  return std::make_shared<data::FashionMNIST>(data::FashionMNIST::default_root(), true,
                                              data::FashionMNIST::default_transform(false), limit);
}

// Training windows of tinyshakespeare's characters, from this process's own cache folder.
std::shared_ptr<const data::Dataset> shakespeare_windows(DType ids = DType::i64) {
  static const data::TextCache cache = data::tokenize_text_cached(
      BOOSTER_SHARED_DIR "/data/tinyshakespeare/input.txt",
      (fs::temp_directory_path() / ("booster_any_model_" + std::to_string(::getpid()))).string());
  data::TokenStreamOptions o;
  o.block_size = kBlock;
  o.ids_dtype = ids;
  return std::make_shared<data::TokenStream>(cache.train_bin, o);
}

class AnyModel : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (dist::world_size() % GetParam().ranks != 0) GTEST_SKIP() << GetParam().name << " needs a multiple of " << GetParam().ranks << " ranks";
  }
};

TEST_P(AnyModel, AnMLPOnFashionMNISTTrainsAsOneProcess) {
  if (!fs::exists(data::FashionMNIST::default_root())) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const Case& c = GetParam();
  auto plugin = plugin_of(c);
  const int n = plugin->dp_size();  // replicas: each sees its own rows
  const int64_t b = 4;
  auto dataset = fashion_images(size_t(n * b * 3));
  auto mlp = [] {
    manual_seed(11);
    return std::make_shared<ImageMLP>(28 * 28, 24, 10);
  };
  if (c.pipeline) {  // a layerwise plugin needs a model that says what its layers are
    try {
      train(plugin, mlp(), image_ce(), dataset, b, 3);
      FAIL() << c.name << " took a model that is not an nn::PipelineModule";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("nn::PipelineModule"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ImageMLP"), std::string::npos) << e.what();
    }
    return;
  }
  const Trained want = train(nullptr, mlp(), image_ce(), dataset, n * b, 3);
  expect_same_training(train(plugin, mlp(), image_ce(), dataset, b, 3), want, c.name);
}

TEST_P(AnyModel, ATokenModelOnATokenStreamTrainsAsOneProcess) {
  const Case& c = GetParam();
  auto plugin = plugin_of(c);
  const int n = plugin->dp_size();
  const int64_t b = 2;
  auto dataset = shakespeare_windows();
  auto model = [] {
    manual_seed(5);
    return token_model();
  };
  const Trained want = train(nullptr, model(), token_ce(), dataset, n * b, 3);
  EXPECT_GT(want.losses.front(), std::log(double(kVocab)) * 0.8);  // from about ln 65 at the start
  expect_same_training(train(plugin, model(), token_ce(), dataset, b, 3), want, c.name);
}

// GPT-2 (tiny) on the same stream: every plugin trains it as one process does, the two-stage
// pipeline included (its head tied to the embeddings across the first and last stage).
TEST_P(AnyModel, GPT2OnATokenStreamTrainsAsOneProcess) {
  const Case& c = GetParam();
  auto plugin = plugin_of(c);
  const int n = plugin->dp_size();
  auto dataset = shakespeare_windows();
  const Trained want = train(nullptr, gpt2_tiny(), token_ce(), dataset, n * 2, 3);
  expect_same_training(train(plugin, gpt2_tiny(), token_ce(), dataset, 2, 3), want, c.name);
}

// i32 token ids (half the bytes of PyTorch's i64) through collate, the samplers, the
// pipeline's micro-batches, the embedding and the loss: every plugin trains GPT-2 on them as
// one process does on i64 ids of the same windows.
TEST_P(AnyModel, GPT2OnI32TokenIdsTrainsAsOnI64) {
  const Case& c = GetParam();
  auto plugin = plugin_of(c);
  const Trained want = train(nullptr, gpt2_tiny(), token_ce(), shakespeare_windows(DType::i64), plugin->dp_size() * 2, 3);
  auto i32 = shakespeare_windows(DType::i32);
  Generator g(1);
  ASSERT_EQ(i32->get(0, g).at("input_ids").dtype(), DType::i32);
  expect_same_training(train(plugin, gpt2_tiny(), token_ce(), i32, 2, 3), want, c.name + " on i32 ids");
}

// LLaMA (tiny, head untied): every plugin, the two-stage pipeline included, trains it as
// one process does.
TEST_P(AnyModel, LlamaOnATokenStreamTrainsAsOneProcess) {
  const Case& c = GetParam();
  auto plugin = plugin_of(c);
  auto dataset = shakespeare_windows();
  const Trained want = train(nullptr, llama_tiny(), token_ce(), dataset, plugin->dp_size() * 2, 3);
  expect_same_training(train(plugin, llama_tiny(), token_ce(), dataset, 2, 3), want, c.name);
}

INSTANTIATE_TEST_SUITE_P(Plugins, AnyModel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// A token model's metrics: the test loss is the mean over every counted token and the
// perplexity its exponential, the same under a plugin as in one process.
TEST(AnyModelMetrics, TokenLossAndPerplexityOverEveryToken) {
  auto dataset = shakespeare_windows();
  manual_seed(5);
  auto model = token_model();
  Booster booster(plugins::make_plugin(Config::from_string(kCases[0].toml, "ddp.toml")));
  data::DataLoaderOptions lo;
  lo.batch_size = 3;
  data::TokenStreamOptions eo;
  eo.block_size = kBlock;
  eo.random_windows = false;
  eo.limit = 10;  // 10 windows over the ranks: a short replica's row is padding, labelled ignore
  auto val = std::make_shared<data::TokenStream>(
      dynamic_cast<const data::TokenStream&>(*dataset).file().path(), eo);
  auto r = booster.boost(model, nullptr, token_ce());
  // Evaluation's sampler: every window once over the ranks, a short share padded.
  auto loader = std::make_shared<data::DataLoader>(
      val, lo, std::make_shared<data::InferenceShardSampler>(val->size(), dist::world_size(), dist::world_rank()));
  Trainer t(booster, r.model, nullptr, token_ce());
  auto loss = std::make_shared<LossHook>();
  auto ppl = std::make_shared<PerplexityHook>();
  t.evaluate(*loader, {loss, ppl});
  const auto& m = dynamic_cast<const LossMetric&>(t.metric(Mode::test, "Loss"));
  EXPECT_EQ(m.samples(), 10 * kBlock);  // every token of the 10 windows once, none of the padding
  // One process over the same windows.
  NoGradGuard ng;
  double sum = 0;
  Generator g(0);
  for (size_t i = 0; i < 10; ++i) {
    auto ex = val->get(i, g);
    Tensor logits = (*model)(ex.at("input_ids").view({1, kBlock}));
    sum += token_ce()(logits, ex.at("labels").view({1, kBlock})).item() * double(kBlock);
  }
  const double mean = sum / double(10 * kBlock);
  EXPECT_NEAR(m.accumulated_value(), mean, 1e-5 * mean);
  EXPECT_NEAR(t.metric(Mode::test, "Perplexity").accumulated_value(), std::exp(mean), 1e-4 * std::exp(mean));
}

// Only a pipeline needs an nn::PipelineModule, and says so by name.
TEST(AnyModelErrors, APipelineRefusesAModelWithoutStagesByName) {
  const Case& pp2 = kCases[6];
  if (dist::world_size() % pp2.ranks != 0) GTEST_SKIP() << "pp 2 needs an even world";
  Booster booster(plugin_of(pp2));
  manual_seed(1);
  auto mlp = std::make_shared<ImageMLP>(4, 4, 2);
  try {
    booster.boost(mlp, std::make_shared<optim::SGD>(mlp->named_parameters(), optim::SGDOptions{0.1}));
    FAIL() << "pp 2 took an ImageMLP";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("pp_size 2 needs a model that runs as pipeline stages"), std::string::npos)
        << e.what();
  }
}

// A batch without the key the model reads names the key and what the batch holds; a
// batch whose tensors have the wrong dtype or shape says which keys it held, as what.
TEST(AnyModelErrors, AWrongKeyDTypeOrShapeIsNamed) {
  Booster booster(nullptr);
  manual_seed(1);
  auto model = token_model();
  auto r = booster.boost(model, nullptr, token_ce());
  try {
    booster.execute_pipeline(single_batch({{"input", Tensor::zeros({2, kBlock}, DType::i64)},
                                           {"labels", Tensor::zeros({2, kBlock}, DType::i64)}}),
                             r.model, on_keys(token_ce()), nullptr, true, false);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the tensor 'input_ids', got {input [2, 8] i64, labels [2, 8] i64}"),
              std::string::npos)
        << e.what();
  }
  try {
    booster.execute_pipeline(single_batch({{"input_ids", Tensor::zeros({2, kBlock})}, {"labels", Tensor::zeros({2, kBlock}, DType::i64)}}),
                             r.model, on_keys(token_ce()), nullptr, true, false);
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("on the batch {input_ids [2, 8] f32, labels [2, 8] i64}: embedding: ids must be "
                                         "integer indices (i64 or i32), got f32"),
              std::string::npos)
        << e.what();
  }
  try {
    booster.execute_pipeline(single_batch({{"input_ids", Tensor::zeros({2, kBlock}, DType::i64)}, {"labels", Tensor::zeros({2, 3}, DType::i64)}}),
                             r.model, on_keys(token_ce()), nullptr, true, false);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("on the batch {input_ids [2, 8] i64, labels [2, 3] i64}: "), std::string::npos)
        << e.what();
  }
}

}  // namespace
