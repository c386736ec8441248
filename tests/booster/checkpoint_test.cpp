// Checkpoint format: round trips, splitting, every corruption, strict = false, and a
// writer killed at random points never damages the previous checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "booster/booster.h"
#include "booster/checkpoint/container.h"
#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/checkpoint/tensor_store.h"
#include "core/autograd/grad_mode.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "tests/support/fixtures.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

using testkit::error_of;
nn::ViTConfig small() { return testkit::tiny_vit(); }
fs::path temp(const std::string& name) { return testkit::temp_path("ckpt_" + name); }

void expect_same(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  }
}

nn::StateDict sample() {
  return {{"w", Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5})},
          {"h", Tensor::from_vector({0.5f, -1.f}, {2}, DType::bf16)},
          {"ids", Tensor::from_ints({3, 1, 4}, {3})}};
}

}  // namespace

TEST(Checkpoint, RoundTripShardedAndSingleWithSplitting) {
  for (bool shard : {true, false}) {
    auto p = temp(shard ? "rt_shard" : "rt_file");
    ckpt::SaveOptions o;
    o.shard = shard;
    o.max_shard_bytes = 16;  // 4 floats: "w" splits across 3 records
    ckpt::save_tensors(p.string(), sample(), o);
    auto l = ckpt::load_tensors(p.string(), "model");
    expect_same(l.tensors, sample());
    EXPECT_GE(l.index.tensors(0).records_size(), 3);
    if (shard) {
      EXPECT_GE(l.index.shard_files_size(), 3);
    }
    EXPECT_NE(error_of([&] { ckpt::load_tensors(p.string(), "optimizer"); }), "");
  }
}

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp("corrupt");
    ckpt::SaveOptions o;
    o.shard = true;
    o.max_shard_bytes = 24;
    ckpt::save_tensors(dir.string(), sample(), o);
    index = ckpt::load_tensors(dir.string(), "model").index;
  }
  fs::path shard(int i) { return dir / index.shard_files(i); }
  void rewrite_index(const std::function<void(proto::Index&)>& edit) {
    proto::Index copy = index;
    edit(copy);
    ckpt::write_message_file((dir / "model.index").string(), copy);
  }
  std::string load_error() { return error_of([&] { ckpt::load_tensors(dir.string(), "model"); }); }
  fs::path dir;
  proto::Index index;
};

// Flips one bit of the byte at `at` of a file.
void flip(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at);
  char c;
  f.read(&c, 1);
  f.seekp(at);
  c ^= 0x10;
  f.write(&c, 1);
}

TEST_F(Corruption, FlippedByteIsAChecksumErrorNamingFileAndTensor) {
  // A flipped bit in the data of 'w' (its element 2.0f, found in the file).
  std::ifstream in(shard(0), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const float two = 2.0f;
  const auto at = bytes.find(std::string(reinterpret_cast<const char*>(&two), 4));
  ASSERT_NE(at, std::string::npos);
  flip(shard(0), std::streamoff(at) + 2);
  const std::string e = load_error();
  EXPECT_NE(e.find(shard(0).string()), std::string::npos) << e;
  EXPECT_NE(e.find("checksum mismatch in tensor 'w'"), std::string::npos) << e;
  // A flipped bit in a record's framing: still an error naming the file and the tensor.
  flip(shard(0), std::streamoff(at) + 2);
  flip(shard(0), std::streamoff(fs::file_size(shard(0))) - 3);
  const std::string e2 = load_error();
  EXPECT_NE(e2.find(shard(0).string()), std::string::npos) << e2;
  EXPECT_NE(e2.find("tensor 'w'"), std::string::npos) << e2;
}

TEST_F(Corruption, TruncatedShard) {
  fs::resize_file(shard(1), fs::file_size(shard(1)) - 5);
  const std::string e = load_error();
  EXPECT_NE(e.find(shard(1).string()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(Corruption, MissingShard) {
  fs::remove(shard(1));
  const std::string e = load_error();
  EXPECT_NE(e.find("lists shard '" + index.shard_files(1) + "', which is missing"), std::string::npos) << e;
}

TEST_F(Corruption, IndexPointingToAMissingTensor) {
  rewrite_index([&](proto::Index& i) { i.mutable_tensors(2)->mutable_records(0)->set_file(index.shard_files(0)); });
  const std::string e = load_error();
  EXPECT_NE(e.find("lists tensor 'ids'"), std::string::npos) << e;
  EXPECT_NE(e.find("which does not hold it"), std::string::npos) << e;
}

TEST_F(Corruption, WrongDtypeAndShape) {
  rewrite_index([&](proto::Index& i) { i.mutable_tensors(1)->set_dtype(proto::F32); });
  EXPECT_NE(load_error().find("tensor 'h' is bf16 but its index says f32"), std::string::npos) << load_error();
  // An index lying about a shape is caught before any record is read: the records' boxes
  // do not fit it.
  rewrite_index([&](proto::Index& i) {
    i.mutable_tensors(0)->set_shape(0, 5);
    i.mutable_tensors(0)->set_shape(1, 2);
  });
  EXPECT_NE(load_error().find("tensor 'w': a record does not fit its tensor"), std::string::npos) << load_error();
}

TEST_F(Corruption, ForeignAndShardFromAnotherSave) {
  std::ofstream(dir / "model.index") << "{\"json\": true}";
  EXPECT_NE(load_error().find("not a booster-cpp checkpoint file"), std::string::npos) << load_error();
  ckpt::write_message_file((dir / "model.index").string(), index);
  proto::Shard other;
  other.set_format_version(1);
  other.set_save_id("someone-else");
  ckpt::write_message_file(shard(0).string(), other);
  EXPECT_NE(load_error().find("belongs to another save"), std::string::npos) << load_error();
}

TEST(Checkpoint, BoosterModelOptimizerSchedulerRoundTrip) {
  auto dir = temp("booster");
  manual_seed(1);
  auto model = std::make_shared<nn::ViTForImageClassification>(small());
  auto opt = std::make_shared<optim::AdamW>(model->named_parameters());
  auto sched = std::make_shared<optim::CosineAnnealingWarmupLR>(*opt, 10, 2);
  Booster booster;
  auto b = booster.boost(model, opt, {}, nullptr, sched);
  Tensor x = Tensor::ones({2, 3, 8, 8});
  Tensor y = Tensor::from_ints({0, 2}, {2});
  auto step = [&](decltype(b)& bb) {
    bb.optimizer->zero_grad();
    Tensor loss = (*bb.model)(x, y).loss;
    booster.backward(loss, *bb.optimizer);
    bb.optimizer->step();
    bb.lr_scheduler->step();
    return loss.item();
  };
  step(b);
  step(b);
  for (bool shard : {true, false}) {
    const std::string m = (dir / (shard ? "model_dir" : "model.ckpt")).string();
    const std::string o = (dir / (shard ? "optim_dir" : "optim.ckpt")).string();
    booster.save_model(*b.model, m, shard);
    booster.save_optimizer(*b.optimizer, o, shard);
    booster.save_lr_scheduler(*b.lr_scheduler, (dir / "sched.ckpt").string());
    manual_seed(99);
    auto model2 = std::make_shared<nn::ViTForImageClassification>(small());
    auto opt2 = std::make_shared<optim::AdamW>(model2->named_parameters());
    auto sched2 = std::make_shared<optim::CosineAnnealingWarmupLR>(*opt2, 10, 2);
    auto b2 = booster.boost(model2, opt2, {}, nullptr, sched2);
    booster.load_model(*b2.model, m);
    booster.load_optimizer(*b2.optimizer, o);
    booster.load_lr_scheduler(*b2.lr_scheduler, (dir / "sched.ckpt").string());
    expect_same(model2->state_dict(), model->state_dict());
    EXPECT_EQ(opt2->param_groups()[0].lr(), opt->param_groups()[0].lr());
    if (!shard) {
      // Both continue identically.
      auto bb = b;
      const double l1 = step(bb), l2 = step(b2);
      EXPECT_EQ(l1, l2);
      expect_same(model2->state_dict(), model->state_dict());
    }
  }
  // strict = false loads what matches and reports the rest.
  nn::ViTConfig other = small();
  other.num_labels = 5;
  auto model3 = std::make_shared<nn::ViTForImageClassification>(other);
  auto b3 = booster.boost(model3);
  EXPECT_THROW(booster.load_model(*b3.model, (dir / "model.ckpt").string()), ValueError);
  booster.load_model(*b3.model, (dir / "model.ckpt").string(), /*strict=*/false);
  const auto saved = ckpt::load_tensors((dir / "model.ckpt").string(), "model").tensors;
  for (auto& [n, t] : saved) {
    if (n.rfind("classifier", 0) != 0) {
      EXPECT_EQ(model3->get_tensor(n).to_vector(), t.to_vector()) << n;
    }
  }
}

// A writer's temp file names the file it stands for; nothing else is taken for one.
TEST(Checkpoint, TempFileNamesMapBackToTheirTarget) {
  EXPECT_EQ(ckpt::temp_file_target(ckpt::temp_file_name("model-1a2b-00001.shard")), "model-1a2b-00001.shard");
  EXPECT_EQ(ckpt::temp_file_target(".model.index.tmp.4242"), "model.index");
  for (const char* other : {"model.index", "model-1a2b-00001.shard", ".model.index.tmp.", ".model.index.tmp.12x", ".tmp.1"})
    EXPECT_EQ(ckpt::temp_file_target(other), "") << other;
}

// A writer SIGKILLed at random points of a save: the previous checkpoint always loads.
TEST(Checkpoint, KilledWriterNeverDamagesThePreviousCheckpoint) {
  auto dir = temp("kill");
  auto params = [](float v) {
    nn::StateDict sd;
    for (int i = 0; i < 12; ++i) sd.emplace_back(std::to_string(i).insert(0, 1, 't'), Tensor::full({64 * 1024}, v));  // 3 MB
    return sd;
  };
  ckpt::SaveOptions o;
  o.shard = true;
  o.max_shard_bytes = 512 * 1024;
  ckpt::save_tensors(dir.string(), params(0), o);
  // Files in the folder that the current index does not reference: what a killed save left.
  auto leftovers = [&] {
    const auto idx = ckpt::load_tensors(dir.string(), "model").index;
    std::set<std::string> referenced(idx.shard_files().begin(), idx.shard_files().end());
    referenced.insert(ckpt::index_file_name("", "model"));
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir)) n += !referenced.count(e.path().filename().string());
    return n;
  };
  std::mt19937 rng(7);
  int interrupted = 0;
  for (int round = 1; round <= 25; ++round) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0;; ++k) ckpt::save_tensors(dir.string(), params(float(round * 100 + k)), o);
    }
    usleep(useconds_t(rng() % 40000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    auto l = ckpt::load_tensors(dir.string(), "model");  // must verify
    const float v = l.tensors[0].second.to_vector()[0];
    for (auto& [n, t] : l.tensors) ASSERT_EQ(t.to_vector()[100], v) << "mixed saves in one checkpoint";
    interrupted += leftovers() > 0;
  }
  // The writer spends nearly all its time inside a save, so most kills land mid-save.
  EXPECT_GE(interrupted, 5);
  // The next save that completes sweeps every stale shard and temp file away.
  ckpt::save_tensors(dir.string(), params(1), o);
  EXPECT_EQ(leftovers(), 0u);
  EXPECT_EQ(ckpt::load_tensors(dir.string(), "model").tensors[5].second.to_vector()[7], 1.f);
}
