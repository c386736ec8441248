// Lazy initialization (nn::LazyInit): recorded, not allocated; materialized with eager
// initialization's values, whole or by region; a clear error when used too early.
#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "nn/lazy.h"
#include "nn/pretrained.h"
#include "nn/vit.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;

namespace {

std::shared_ptr<ViTForImageClassification> build(uint64_t seed, bool lazy) {
  manual_seed(seed);
  if (!lazy) return std::make_shared<ViTForImageClassification>(testkit::tiny_vit(2));
  LazyInit scope;
  return std::make_shared<ViTForImageClassification>(testkit::tiny_vit(2));
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.to_vector(), b.to_vector()) << what;
}

}  // namespace

TEST(LazyInit, RecordsWithoutAllocatingAndMaterializesAsEager) {
  auto eager = build(5, false);
  const size_t before = host_tier().bytes_in_use();
  auto lazy = build(5, true);
  EXPECT_EQ(host_tier().bytes_in_use(), before) << "a lazy model allocates no tensor memory";
  EXPECT_TRUE(is_lazy(*lazy));
  // The generator advanced as eager initialization advances it: what comes next is the same.
  const Tensor p = lazy->named_parameters().front().second;
  EXPECT_NE(p.describe().find("lazy"), std::string::npos);
  materialize(*lazy);
  EXPECT_FALSE(is_lazy(*lazy));
  auto e = eager->state_dict(), l = lazy->state_dict();
  ASSERT_EQ(e.size(), l.size());
  for (size_t i = 0; i < e.size(); ++i) expect_bitwise_equal(l[i].second, e[i].second, e[i].first);
  // Same handles before and after: an optimizer built on the lazy model keeps working.
  EXPECT_TRUE(lazy->named_parameters().front().second.is_same(p));
  auto [x, y] = testkit::image_batch(2, 3);
  EXPECT_NEAR((*lazy)(x, y).loss.item(), (*eager)(x, y).loss.item(), 0.0);
}

TEST(LazyInit, UseBeforeMaterializeNamesTheParameter) {
  auto lazy = build(5, true);
  auto [x, y] = testkit::image_batch(2, 3);
  const std::string err = testkit::error_of([&] { (*lazy)(x, y); });
  EXPECT_NE(err.find("vit.embeddings."), std::string::npos) << err;
  EXPECT_NE(err.find("nn::LazyInit"), std::string::npos) << err;
  EXPECT_NE(err.find("materialize"), std::string::npos) << err;
  const std::string err2 = testkit::error_of([&] { lazy->get_tensor("classifier.weight").to_vector(); });
  EXPECT_NE(err2.find("'classifier.weight'"), std::string::npos) << err2;
}

TEST(LazyInit, AnyRegionMaterializesAloneWithTheEagerValues) {
  auto eager = build(11, false);
  auto lazy = build(11, true);
  for (auto& [name, t] : lazy->named_parameters()) {
    const Tensor want = eager->get_tensor(name);
    const int64_t n = want.numel();
    // A flat range (a ZeRO shard) and, for matrices, a column box (a row-parallel slice)
    // and a flat range of that box (a ZeRO shard of a tensor-parallel slice).
    const Region flat = Region::flat(want.shape(), n / 3, n - n / 3 - 1);
    Tensor got = region_values(t, flat, DType::f32);
    expect_bitwise_equal(got, want.contiguous().view({-1}).narrow(0, n / 3, n - n / 3 - 1).contiguous(), name + " flat");
    if (want.dim() == 2 && want.size(1) % 2 == 0) {
      const int64_t half = want.size(1) / 2;
      const Region box = Region::box(want.shape(), {0, half}, {want.size(0), half});
      expect_bitwise_equal(region_values(t, box, DType::f32), want.narrow(1, half, half).contiguous(), name + " box");
      const Region sub = box.sub_range(3, box.numel() - 5);
      expect_bitwise_equal(region_values(t, sub, DType::bf16),
                           want.narrow(1, half, half).contiguous().view({-1}).narrow(0, 3, box.numel() - 5).to(DType::bf16),
                           name + " range of the box, bf16");
    }
  }
  EXPECT_TRUE(is_lazy(*lazy)) << "region_values makes copies; the model stays lazy";
}

TEST(LazyInit, CastAndRestrictThenMaterialize) {
  auto eager = build(13, false);
  auto lazy = build(13, true);
  Tensor w = lazy->get_tensor("vit.encoder.layer.0.output.dense.weight");
  const Tensor want = eager->get_tensor("vit.encoder.layer.0.output.dense.weight");
  const Region box = Region::box(want.shape(), {0, want.size(1) / 2}, {want.size(0), want.size(1) / 2});
  lazy_restrict(w, box);
  lazy_cast(w, DType::bf16);
  EXPECT_EQ(w.shape(), box.local_shape());
  materialize(w);
  ASSERT_NE(w.region(), nullptr);
  EXPECT_EQ(*w.region(), box);
  expect_bitwise_equal(w, want.narrow(1, want.size(1) / 2, want.size(1) / 2).contiguous().to(DType::bf16), "slice");
}

TEST(LazyInit, CloneStaysLazyAndFactoriesOutsideTheScopeAreReal) {
  auto lazy = build(17, true);
  auto copy = std::dynamic_pointer_cast<ViTForImageClassification>(lazy->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(is_lazy(*copy));
  materialize(*copy);
  materialize(*lazy);
  auto a = lazy->state_dict(), b = copy->state_dict();
  for (size_t i = 0; i < a.size(); ++i) expect_bitwise_equal(b[i].second, a[i].second, a[i].first);
  Tensor real = Tensor::zeros({3});
  EXPECT_FALSE(is_lazy(real));
  {
    LazyInit scope;
    EXPECT_TRUE(is_lazy(Tensor::ones({2})));
    EXPECT_FALSE(is_lazy(Tensor::from_vector({1, 2}, {2}))) << "data given is real data";
  }
}

TEST(LazyInit, PretrainedFolderBecomesTheSourceAndMaterializesAsEager) {
  const auto dir = testkit::temp_path("lazy_pretrained");
  {
    manual_seed(21);
    ViTForImageClassification m(testkit::tiny_vit(2));
    save_pretrained(m, dir.string());
  }
  auto eager = vit_from_pretrained(dir.string());
  std::shared_ptr<ViTForImageClassification> lazy;
  {
    LazyInit scope;
    lazy = vit_from_pretrained(dir.string());
  }
  ASSERT_TRUE(is_lazy(*lazy));
  const Tensor w = lazy->get_tensor("vit.encoder.layer.1.intermediate.dense.weight");
  const Tensor want = eager->get_tensor("vit.encoder.layer.1.intermediate.dense.weight");
  const Region rows = Region::box(want.shape(), {want.size(0) / 2, 0}, {want.size(0) / 2, want.size(1)});
  expect_bitwise_equal(region_values(w, rows, DType::f32), want.narrow(0, want.size(0) / 2, want.size(0) / 2).contiguous(),
                       "a row slice read from the file");
  materialize(*lazy);
  auto e = eager->state_dict(), l = lazy->state_dict();
  for (size_t i = 0; i < e.size(); ++i) expect_bitwise_equal(l[i].second, e[i].second, e[i].first);
  std::filesystem::remove_all(dir);
}

// GPT-2 and LLaMA under LazyInit: nothing allocated, materialized with the eager values.
TEST(LazyInit, LanguageModelsMaterializeAsEager) {
  auto check = [](auto make) {
    manual_seed(6);
    auto eager = make();
    manual_seed(6);
    const size_t before = host_tier().bytes_in_use();
    decltype(eager) lazy;
    {
      LazyInit scope;
      lazy = make();
    }
    EXPECT_EQ(host_tier().bytes_in_use(), before);
    materialize(*lazy);
    auto e = eager->state_dict(), l = lazy->state_dict();
    ASSERT_EQ(e.size(), l.size());
    for (size_t i = 0; i < e.size(); ++i) expect_bitwise_equal(l[i].second, e[i].second, e[i].first);
  };
  check([] { return std::make_shared<GPT2LMHeadModel>(GPT2Config::preset("gpt2-tiny")); });
  check([] { return std::make_shared<LlamaForCausalLM>(LlamaConfig::preset("llama-tiny")); });
}
