// TorchDDPPlugin's own behaviour beyond the conformance suite: broadcast at boost, unused
// parameters named, its wrappers, bf16 buckets, the mixed-precision leaf. Runs under
// mpirun -np 1, 2, 4.
#include <gtest/gtest.h>

#include <filesystem>

#include "booster/auto_precision.h"
#include "booster/booster.h"
#include "booster/checkpoint/reader.h"
#include "booster/mixed_precision.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "plugins/registry.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/torch_ddp/torch_ddp_plugin.h"
#include "tests/plugins/vit_cases.h"

using namespace booster;
using namespace booster::plugin_tests;

namespace {

// DDP specifics: ranks start from rank 0's weights; an unused parameter is named.
TEST(TorchDDP, BroadcastAtBoostAndUnusedParameters) {
  auto model = fresh_model(100 + uint64_t(dist::world_rank()));
  Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\n")));
  auto boosted = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  for (auto& [name, p] : model->named_parameters()) {
    Tensor mx = p.detach().clone(), mn = scale(p.detach(), -1.0);
    dist::all_reduce(mx, dist::ReduceOp::max);
    dist::all_reduce(mn, dist::ReduceOp::max);
    EXPECT_EQ(mx.to_vector(), scale(mn, -1.0).to_vector()) << name << " differs across ranks after boost";
  }
  // Freeze nothing but skip the classifier: its parameters get no gradient.
  auto [x, y] = global_batch(0, 2);
  Tensor feats = model->vit->forward(x);
  try {
    booster.backward(sum(feats), *boosted.optimizer);
    FAIL() << "unused parameters were not reported";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("classifier.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("find_unused_parameters"), std::string::npos) << e.what();
  }
  Booster lenient(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\nfind_unused_parameters=true\n")));
  auto m2 = fresh_model();
  auto b2 = lenient.boost(m2, std::make_shared<optim::SGD>(m2->named_parameters(), sgd()));
  lenient.backward(sum(m2->vit->forward(x)), *b2.optimizer);
  EXPECT_TRUE(m2->get_tensor("classifier.weight").grad().defined());
  b2.optimizer->step();
}

// DDP on the seams: boost returns a TorchDDPModel, whose GradSync is its reducer, and leaves
// the optimizer as it was (backward finishes the reduction); boosting the model again leaves
// exactly one live reducer hook per parameter once the first result is gone.
TEST(TorchDDP, BoostReturnsItsWrappersAndReboostingDropsOldHooks) {
  auto model = fresh_model();
  auto hooks_on = [&](const std::string& n) { return model->get_tensor(n).impl()->post_accumulate_grad_hooks.size(); };
  {
    Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\n")));
    auto first = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
    EXPECT_NE(dynamic_cast<plugins::TorchDDPModel*>(first.model.wrapper().get()), nullptr);
    auto* ddp = dynamic_cast<plugins::TorchDDPModel*>(first.model.wrapper().get());
    ASSERT_NE(ddp, nullptr);
    EXPECT_EQ(first.model->grad_sync(), &ddp->reducer());
    EXPECT_EQ(first.optimizer->type_name(), "OptimizerWrapper");
    EXPECT_EQ(hooks_on("classifier.weight"), 1u);
  }
  EXPECT_EQ(hooks_on("classifier.weight"), 0u);  // the first reducer removed its hooks
  Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\n")));
  auto second = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  EXPECT_EQ(hooks_on("classifier.weight"), 1u);
  auto [x, y] = my_slice(global_batch(0, n_ranks() * 2), 2);
  booster.backward((*second.model)(x, y).loss, *second.optimizer);
  second.optimizer->step();
}

// Under bf16 mixed precision DDP's buckets hold bf16 (the working copies' dtype, as PyTorch's
// buckets hold the parameters'), and each averaged gradient is the ranks' own bf16 gradients
// summed in f32 and rounded once: bit for bit on 2 ranks (one f32 addition), within a bf16
// step on 4 (the f32 sums may round in another order).
TEST(TorchDDP, AveragesBf16GradientsInBf16Buckets) {
  auto local = fresh_model();
  Booster lb(nullptr, "bf16");
  auto l = lb.boost(local, std::make_shared<optim::SGD>(local->named_parameters(), sgd()));
  Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\nbucket_cap_mb = 0.01\n")),
                  "bf16");
  auto model = fresh_model();
  auto d = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  auto [x, y] = my_slice(global_batch(0, n_ranks() * 2), 2);
  lb.backward((*l.model)(x, y).loss, *l.optimizer);
  booster.backward((*d.model)(x, y).loss, *d.optimizer);
  const auto& reducer = d.model->find<plugins::TorchDDPModel>()->reducer();
  ASSERT_GT(reducer.num_buckets(), 1u);
  for (size_t i = 0; i < reducer.num_buckets(); ++i) EXPECT_EQ(reducer.bucket_dtype(i), DType::bf16) << "bucket " << i;
  const auto mine = local->named_parameters(), averaged = model->named_parameters();
  ASSERT_EQ(mine.size(), averaged.size());
  const int n = n_ranks();
  for (size_t k = 0; k < mine.size(); ++k) {
    Tensor g = mine[k].second.grad();
    ASSERT_EQ(g.dtype(), DType::bf16) << mine[k].first;
    Tensor all = Tensor::empty({n * g.numel()}, DType::bf16);
    dist::all_gather(all, g.contiguous().view({-1}));
    const auto every = all.to_vector(), got = averaged[k].second.grad().to_vector();
    for (int64_t i = 0; i < g.numel(); ++i) {
      double exact = 0;
      for (int r = 0; r < n; ++r) exact += double(every[size_t(r * g.numel() + i)]);
      const float want = Tensor::from_vector({float(exact) * float(1.0 / n)}, {1}).to(DType::bf16).to_vector()[0];
      if (n <= 2) ASSERT_EQ(got[size_t(i)], want) << mine[k].first << " element " << i;
      else ASSERT_LE(std::abs(got[size_t(i)] - want), std::abs(want) / 128) << mine[k].first << " element " << i;
    }
  }
}

// DDP under the mixed-precision leaf: its reduction runs in backward, then the leaf updates
// the fp32 masters. On N ranks it trains like one bf16 process on the N-times batch.
TEST(TorchDDP, DecoratesTheMixedPrecisionLeaf) {
  const int64_t b = 2;
  auto ref = fresh_model();
  Booster rb(nullptr, "bf16");
  auto r = rb.boost(ref, std::make_shared<optim::SGD>(ref->named_parameters(), sgd()));
  Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname='torch_ddp'\n")), "bf16");
  auto model = fresh_model();
  auto d = booster.boost(model, std::make_shared<optim::SGD>(model->named_parameters(), sgd()));
  EXPECT_EQ(d.model->type_name(), "MixedPrecisionModel");
  EXPECT_EQ(d.model->inner()->type_name(), "TorchDDPModel");
  EXPECT_EQ(d.optimizer->type_name(), "MixedPrecisionOptimizer");
  for (int s = 0; s < 3; ++s) {
    auto batch = global_batch(s, n_ranks() * b);
    r.optimizer->zero_grad();
    rb.backward((*r.model)(batch.first, batch.second).loss, *r.optimizer);
    r.optimizer->step();
    auto [x, y] = my_slice(batch, b);
    d.optimizer->zero_grad();
    booster.backward((*d.model)(x, y).loss, *d.optimizer);
    d.optimizer->step();
  }
  // bf16 gradients of N small batches averaged vs one large batch: equal to bf16 rounding.
  auto masters = [](OptimizerWrapper& o) -> const MasterParams& { return o.find<MixedPrecisionOptimizer>()->masters(); };
  for (auto& e : masters(*r.optimizer).entries()) {
    auto a = masters(*d.optimizer).master(e.name).to_vector(), want = e.master.to_vector();
    double err = 0, scale = 1e-2;  // floor: a bias near zero moves by bf16 noise of the gradients
    for (size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, double(std::abs(a[i] - want[i])));
      scale = std::max(scale, double(std::abs(want[i])));
    }
    EXPECT_LE(err, 2e-2 * scale) << e.name;
  }
  // The checkpoint records the precision the run trained in, though DDP does not own it.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("booster_ddp_bf16_np" + std::to_string(n_ranks()) + ".ckpt")).string();
  booster.save_model(*d.model, path);
  ckpt::CheckpointReader reader(path, "model");
  EXPECT_EQ(reader.index().layout().plugin(), "torch_ddp");
  EXPECT_EQ(reader.index().layout().precision(), "bf16");
  EXPECT_EQ(reader.index().layout().dp_size(), n_ranks());
}

}  // namespace

// mixed_precision = "auto": bf16 exactly where the measured bf16 matmul runs 1.1x the fp32
// one, the same choice on every rank, taken by the Booster and by a plugin's own precision.
TEST(AutoPrecision, EveryRankChoosesAlikeByTheMeasuredRule) {
  const AutoPrecision& a = auto_precision();
  EXPECT_GT(a.fp32_gflops, 0);
  EXPECT_GT(a.bf16_gflops, 0);
  EXPECT_EQ(a.precision == "bf16", a.bf16_gflops >= 1.1 * a.fp32_gflops) << a.why;
  EXPECT_NE(a.why.find(a.precision), std::string::npos) << a.why;
  const double bf16 = a.precision == "bf16" ? 1.0 : 0.0;
  EXPECT_EQ(dist::all_reduce_scalar(bf16, dist::ReduceOp::max), dist::all_reduce_scalar(bf16, dist::ReduceOp::min));
  Booster b(plugins::make_plugin(Config::from_string("[plugin]\nname = 'torch_ddp'\n", "ddp.toml")), "auto");
  EXPECT_EQ(b.mixed_precision(), a.precision == "bf16" ? "bf16" : "");
  EXPECT_EQ(resolve_precision("fp16"), "fp16");
  auto zero = plugins::make_plugin(Config::from_string("[plugin]\nname = 'low_level_zero'\nprecision = 'auto'\n", "z.toml"));
  ASSERT_NE(zero, nullptr);
  // The plugin resolves its own option, from a config or from C++.
  EXPECT_EQ(std::static_pointer_cast<plugins::LowLevelZeroPlugin>(zero)->options().precision, a.precision);
  plugins::LowLevelZeroOptions lo;
  lo.precision = "auto";
  EXPECT_EQ(plugins::LowLevelZeroPlugin(lo).options().precision, a.precision);
  EXPECT_THROW(Booster(nullptr, "automatic"), ValueError);
}
