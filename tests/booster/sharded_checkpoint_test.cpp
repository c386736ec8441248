// Checkpoints written by every rank under simulated layouts (replicated whole tensors,
// ZeRO flat shards, column and row splits, pipeline-stage subsets, and tensor-parallel
// boxes ZeRO-sharded over the data-parallel ranks, all at once) load under every other
// layout, sharded and as one file; a rank reads only the records it needs; every failure
// is raised on every rank. Runs under mpirun -np 1, 2 and 4.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "booster/checkpoint/records.h"
#include "booster/checkpoint/state_io.h"
#include "booster/checkpoint/tensor_store.h"
#include "booster/checkpoint/writer.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/fixtures.h"

using namespace booster;
using booster::testkit::error_of;
namespace fs = std::filesystem;

namespace {

int world() { return dist::world_size(); }

struct Logical {
  std::string name;
  Shape shape;
  DType dtype;
};
const std::vector<Logical> kTensors = {{"w", {8, 12}, DType::f32},   {"b", {12}, DType::f32},
                                       {"e", {6, 4}, DType::bf16},   {"s", {}, DType::f32},
                                       {"ids", {5}, DType::i64},     {"big", {16, 20}, DType::f32},
                                       {"ids32", {2, 3}, DType::i32}};

// The logical values: element i of tensor t is t*1000 + i (exact in bf16 for e's small range).
Tensor logical(size_t t) {
  const auto& l = kTensors[t];
  std::vector<float> v(size_t(shape_numel(l.shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = l.dtype == DType::bf16 ? float(int(t) * 4 + int(i % 7)) : float(t * 1000 + i);
  if (is_index(l.dtype)) {
    std::vector<int64_t> iv(v.begin(), v.end());
    return Tensor::from_ints(iv, l.shape).to(l.dtype);
  }
  return Tensor::from_vector(v, l.shape, l.dtype);
}

// The local data of `region` of tensor t (values, or zeros for a destination).
Tensor local(size_t t, const Region& r, bool values) {
  Tensor out = Tensor::zeros(r.local_shape(), kTensors[t].dtype);
  if (values) {
    Tensor full = logical(t);
    ckpt::copy_shared(out, r, full.raw_data(), full.dtype(), Region::whole(full.shape()));
  }
  return out;
}

// A layout: the regions rank `rank` of `world` holds of each tensor.
using Layout = std::function<std::vector<std::pair<size_t, Region>>(int rank, int world)>;

std::vector<std::pair<size_t, Region>> every(const std::function<std::optional<Region>(size_t, const Shape&)>& f) {
  std::vector<std::pair<size_t, Region>> out;
  for (size_t t = 0; t < kTensors.size(); ++t)
    if (auto r = f(t, kTensors[t].shape)) out.emplace_back(t, *r);
  return out;
}

// ZeRO's partition of `numel` elements: chunk ceil(numel / parts), this part's share.
std::optional<std::pair<int64_t, int64_t>> zero_share(int64_t numel, int part, int parts) {
  const int64_t c = (numel + parts - 1) / parts, lo = std::min(numel, c * part), hi = std::min(numel, lo + c);
  if (lo >= hi) return std::nullopt;
  return std::make_pair(lo, hi - lo);
}

std::optional<Region> split_dim(const Shape& s, size_t d, int part, int parts) {
  if (s.empty() || s[d] % parts) return Region::whole(s);
  Shape o(s.size(), 0), e = s;
  e[d] = s[d] / parts;
  o[d] = e[d] * part;
  return Region::box(s, o, e);
}

const std::map<std::string, Layout> kLayouts = {
    {"whole", [](int, int) { return every([](size_t, const Shape& s) { return Region::whole(s); }); }},
    {"flat",
     [](int r, int w) {
       return every([&](size_t, const Shape& s) -> std::optional<Region> {
         auto z = zero_share(shape_numel(s), r, w);
         return z ? std::optional<Region>(Region::flat(s, z->first, z->second)) : std::nullopt;
       });
     }},
    {"column", [](int r, int w) { return every([&](size_t, const Shape& s) { return split_dim(s, 0, r, w); }); }},
    {"row",
     [](int r, int w) { return every([&](size_t, const Shape& s) { return split_dim(s, s.empty() ? 0 : s.size() - 1, r, w); }); }},
    {"stages",
     [](int r, int w) {
       return every([&](size_t t, const Shape& s) -> std::optional<Region> {
         if (int(t) % w != r) return std::nullopt;
         return Region::whole(s);
       });
     }},
    // tp = 2 (where the world allows) splits 2-D tensors by rows and 1-D ones in halves;
    // ZeRO shards each 2-D box flat over the dp ranks; "big" lives on one stage.
    {"tp_zero_stage",
     [](int r, int w) {
       const int tp = w % 2 == 0 ? 2 : 1, dp = w / tp, tr = r % tp, dr = r / tp;
       return every([&](size_t t, const Shape& s) -> std::optional<Region> {
         if (kTensors[t].name == "big") return dr == dp - 1 && tr == 0 ? std::optional<Region>(Region::whole(s)) : std::nullopt;
         auto box = split_dim(s, 0, tr, tp);
         if (s.size() != 2) return box;
         auto z = zero_share(box->numel(), dr, dp);
         return z ? std::optional<Region>(box->sub_range(z->first, z->second)) : std::nullopt;
       });
     }},
};

ShardedState state_of(const Layout& layout, bool values) {
  ShardedState out;
  for (auto& [t, r] : layout(dist::world_rank(), world())) out.push_back({kTensors[t].name, local(t, r, values), r});
  return out;
}

int64_t bytes_of(const ShardedState& s) {
  int64_t b = 0;
  for (auto& st : s) b += int64_t(st.tensor.nbytes());
  return b;
}

// One folder shared by every rank.
fs::path shared_dir(const std::string& tag) {
  const std::string mine = (fs::temp_directory_path() / ("booster_sharded_" + tag + "_" + std::to_string(::getpid()))).string();
  const fs::path d = dist::all_gather_bytes(mine)[0];
  if (dist::world_rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  dist::barrier();
  return d;
}

void remove_shared(const fs::path& d) {
  dist::barrier();  // every rank is done with it
  if (dist::world_rank() == 0) fs::remove_all(d);
}

ckpt::WriteOptions opts(bool shard) {
  ckpt::WriteOptions o;
  o.shard = shard;
  o.max_shard_bytes = 160;  // small: "big" splits into many records over several files
  return o;
}

}  // namespace

TEST(ShardedCheckpoint, EveryLayoutLoadsUnderEveryOther) {
  const fs::path dir = shared_dir("matrix");
  for (bool shard : {true, false}) {
    for (auto& [wname, wl] : kLayouts) {
      const std::string path = (dir / (wname + (shard ? "" : ".ckpt"))).string();
      ckpt::save_state(path, state_of(wl, true), opts(shard));
      for (auto& [rname, rl] : kLayouts) {
        ShardedState dst = state_of(rl, false);
        ckpt::CheckpointReader reader(path, "model");
        const auto rep = ckpt::load_state(reader, dst, /*strict=*/true,
                                          "load " + wname + " as " + rname);
        EXPECT_TRUE(rep.missing.empty() && rep.mismatched.empty()) << rep.str();
        for (auto& st : dst) {
          size_t t = 0;
          while (kTensors[t].name != st.name) ++t;
          const Tensor want = local(t, st.region, true);
          EXPECT_EQ(st.tensor.to_vector(), want.to_vector())
              << "written as " << wname << ", read as " << rname << " (shard " << shard << "): " << st.name << " "
              << st.region.str() << " on rank " << dist::world_rank();
        }
        // A rank reads exactly its own share when the layouts agree: nothing more.
        if (wname == rname) {
          EXPECT_EQ(int64_t(reader.bytes_read()), bytes_of(dst)) << wname << " on rank " << dist::world_rank();
        }
      }
    }
  }
  remove_shared(dir);
}

TEST(ShardedCheckpoint, ReplicasShareTheWriting) {
  const int n = world();
  // Replicated whole tensors: each distinct tensor is written once, by the least-loaded
  // holder, so with several ranks every rank writes some files.
  const fs::path dir = shared_dir("replicas");
  ckpt::save_state(dir.string(), state_of(kLayouts.at("whole"), true), opts(true));
  ckpt::CheckpointReader r(dir.string(), "model");
  std::set<std::string> writers;
  for (auto& f : r.index().shard_files()) writers.insert(f.substr(f.find("-r") + 2, 5));
  EXPECT_EQ(int(writers.size()), n) << "files written by " << writers.size() << " of " << n << " ranks";
  int records = 0;
  for (auto& e : r.index().tensors()) records += e.records_size();
  EXPECT_GT(records, int(kTensors.size()));  // "big" was split into bounded records
  remove_shared(dir);
}

TEST(ShardedCheckpoint, ABadLayoutFailsOnEveryRankNamingIt) {
  const int n = world();
  const fs::path dir = shared_dir("bad");
  // One rank describes a tensor whose data does not fill its region.
  ShardedState s = state_of(kLayouts.at("whole"), true);
  if (dist::world_rank() == n - 1) s[0].tensor = Tensor::zeros({3});
  std::string e = error_of([&] { ckpt::save_state((dir / "a").string(), s, opts(true)); });
  EXPECT_NE(e.find("rank " + std::to_string(n - 1)), std::string::npos) << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
  // A gap: the last rank saves only half of its ZeRO shard of "w".
  s = state_of(kLayouts.at("flat"), true);
  if (dist::world_rank() == n - 1) {
    const int64_t half = s[0].region.numel() / 2;
    s[0] = {"w", s[0].tensor.view({-1}).narrow(0, 0, half).contiguous(), s[0].region.sub_range(0, half)};
  }
  e = error_of([&] { ckpt::save_state((dir / "b").string(), s, opts(true)); });
  EXPECT_NE(e.find("the parts of tensor 'w' "), std::string::npos) << e;
  if (n > 1) {
    // Overlapping, unequal regions: one rank whole, another a column half.
    s = state_of(dist::world_rank() == 0 ? kLayouts.at("whole") : kLayouts.at("column"), true);
    e = error_of([&] { ckpt::save_state((dir / "c").string(), s, opts(true)); });
    EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  }
  // Nothing was written by the failed saves.
  EXPECT_FALSE(fs::exists(dir / "a" / "model.index"));
  // Strict loading: a tensor missing on one rank is an error on every rank, before any read.
  ckpt::save_state((dir / "ok").string(), state_of(kLayouts.at("whole"), true), opts(true));
  ckpt::CheckpointReader r((dir / "ok").string(), "model");
  ShardedState dst = state_of(kLayouts.at("flat"), false);
  if (dist::world_rank() == 0) dst.push_back({"not_saved", Tensor::zeros({2}), Region::whole({2})});
  e = error_of([&] { ckpt::load_state(r, dst, true, "strict load"); });
  EXPECT_NE(e.find("missing: not_saved"), std::string::npos) << e;
  EXPECT_EQ(r.bytes_read(), 0u);
  remove_shared(dir);
}

// use_async: the snapshot is taken before save_state_async returns (the state changed at once
// does not leak into it), whatever the staging budget (everything copied, part, nothing), and
// what loads after synchronize() is what a synchronous save writes.
TEST(AsyncCheckpoint, TheSnapshotIsTakenAtTheCallAndLoadsLikeASyncSave) {
  const fs::path dir = shared_dir("async");
  const Layout& wl = kLayouts.at("tp_zero_stage");
  ckpt::AsyncWriter writer;
  for (bool shard : {true, false}) {
    for (size_t budget : {size_t(1) << 30, size_t(300), size_t(0)}) {
      const std::string tag = std::to_string(budget) + (shard ? "" : ".ckpt");
      const std::string path = (dir / ("async_" + tag)).string(), sync_path = (dir / ("sync_" + tag)).string();
      ShardedState s = state_of(wl, true);
      ckpt::save_state_async(path, s, opts(shard), writer, budget);
      for (auto& st : s) st.tensor.fill_(-1.0);  // training goes on at once
      writer.synchronize();
      ckpt::save_state(sync_path, state_of(wl, true), opts(shard));
      for (auto& [rname, rl] : kLayouts) {
        ShardedState a = state_of(rl, false), b = state_of(rl, false);
        ckpt::CheckpointReader ra(path, "model"), rb(sync_path, "model");
        ckpt::load_state(ra, a, true, "load async as " + rname);
        ckpt::load_state(rb, b, true, "load sync as " + rname);
        for (size_t i = 0; i < a.size(); ++i) {
          size_t t = 0;
          while (kTensors[t].name != a[i].name) ++t;
          EXPECT_EQ(a[i].tensor.to_vector(), local(t, a[i].region, true).to_vector())
              << "budget " << budget << " shard " << shard << " read as " << rname << ": " << a[i].name;
          EXPECT_EQ(a[i].tensor.to_vector(), b[i].tensor.to_vector());
        }
      }
    }
  }
  remove_shared(dir);
}

// Saves queue in order; a second save of the same kind waits for the first (one snapshot of
// a kind at a time); a writer going out of scope finishes what it was given.
TEST(AsyncCheckpoint, SavesQueueInOrderAndTheWriterFinishesThemWhenDestroyed) {
  const fs::path dir = shared_dir("async_order");
  const Layout& wl = kLayouts.at("flat");
  {
    ckpt::AsyncWriter writer;
    ShardedState s = state_of(wl, true);
    ckpt::save_state_async((dir / "first").string(), s, opts(true), writer);
    EXPECT_TRUE(writer.pending("model"));
    EXPECT_FALSE(writer.pending("optimizer"));
    for (auto& st : s) st.tensor.fill_(7.0);
    ckpt::save_state_async((dir / "second").string(), s, opts(true), writer);
    std::vector<int> order;
    writer.submit([&](const dist::ProcessGroup*) { order.push_back(1); }, "a task after the saves");
    writer.synchronize();
    EXPECT_FALSE(writer.pending());
    EXPECT_EQ(order, std::vector<int>{1});
    ckpt::save_state_async((dir / "third").string(), state_of(wl, true), opts(true), writer);
  }  // destroyed with "third" in flight
  for (const char* name : {"first", "second", "third"}) {
    ShardedState dst = state_of(wl, false);
    ckpt::CheckpointReader r((dir / name).string(), "model");
    ckpt::load_state(r, dst, true, std::string("load ") + name);
    for (auto& st : dst) {
      size_t t = 0;
      while (kTensors[t].name != st.name) ++t;
      const Tensor want = std::string(name) == "second" ? Tensor::full(st.region.local_shape(), 7.0, kTensors[t].dtype)
                                                        : local(t, st.region, true);
      EXPECT_EQ(st.tensor.to_vector(), want.to_vector()) << name << ": " << st.name;
    }
  }
  remove_shared(dir);
}

// The staging memory is kept from one save of a kind to the next (only the first save pays
// for fresh pages); a staging past what the snapshot announced is refused, naming it.
TEST(AsyncCheckpoint, TheStagingArenaIsReusedBetweenSaves) {
  const fs::path dir = shared_dir("async_arena");
  ckpt::AsyncWriter writer;
  ckpt::save_state_async((dir / "a").string(), state_of(kLayouts.at("flat"), true), opts(true), writer);
  const size_t capacity = writer.arena("model").capacity();
  EXPECT_GT(capacity, 0u);
  ckpt::save_state_async((dir / "b").string(), state_of(kLayouts.at("flat"), true), opts(true), writer);
  writer.synchronize();
  EXPECT_EQ(writer.arena("model").capacity(), capacity) << "the second save stages into the same memory";
  EXPECT_EQ(writer.arena("optimizer").capacity(), 0u);
  ckpt::StagingArena arena;
  arena.begin(ckpt::StagingArena::slot_bytes(16));
  Tensor a = arena.stage(Tensor::full({4}, 2.0));
  const void* first = a.raw_data();
  EXPECT_EQ(a.to_vector(), (std::vector<float>{2, 2, 2, 2}));
  const size_t rest = arena.capacity() - ckpt::StagingArena::slot_bytes(16);
  EXPECT_NE(error_of([&] { arena.stage(Tensor::zeros({int64_t(rest / 4) + 1})); }).find("overruns the arena"),
            std::string::npos);
  arena.begin(ckpt::StagingArena::slot_bytes(16));
  EXPECT_EQ(arena.stage(Tensor::full({4}, 3.0)).raw_data(), first) << "a new snapshot starts at the arena's start";
  remove_shared(dir);
}

// A layout error is raised at the call, on every rank; a write that fails behind training is
// raised by the next synchronize(), on every rank, naming the path, and the writer goes on.
TEST(AsyncCheckpoint, ErrorsReachEveryRankAtTheCallOrAtSynchronize) {
  const int n = world();
  const fs::path dir = shared_dir("async_errors");
  ckpt::AsyncWriter writer;
  ShardedState s = state_of(kLayouts.at("whole"), true);
  if (dist::world_rank() == n - 1) s[0].tensor = Tensor::zeros({3});
  std::string e = error_of([&] { ckpt::save_state_async((dir / "a").string(), s, opts(true), writer); });
  EXPECT_NE(e.find("rank " + std::to_string(n - 1)), std::string::npos) << e;
  // A folder that cannot be made: a file stands where it should be.
  if (dist::world_rank() == 0) std::ofstream(dir / "file") << "x";
  dist::barrier();
  const std::string bad = (dir / "file" / "ckpt").string();
  e = error_of([&] {
    ckpt::save_state_async(bad, state_of(kLayouts.at("flat"), true), opts(true), writer);
  });
  EXPECT_EQ(e, "") << "the write fails behind training, not at the call";
  e = error_of([&] { writer.synchronize(); });
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { writer.synchronize(); }), "") << "an error is raised once";
  ckpt::save_state_async((dir / "ok").string(), state_of(kLayouts.at("flat"), true), opts(true), writer);
  writer.synchronize();
  EXPECT_TRUE(fs::exists(dir / "ok" / "model.index"));
  remove_shared(dir);
}

namespace {

// The staging budget is half of what /proc/meminfo calls available (it read only the first
// line's key and value, so it was always the 1 GB fallback), or BOOSTER_ASYNC_STAGING_MB.
TEST(AsyncCheckpoint, TheStagingBudgetIsHalfTheAvailableMemory) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  size_t available_kb = 0;
  while (std::getline(meminfo, line))
    if (line.rfind("MemAvailable:", 0) == 0) available_kb = std::stoull(line.substr(13));
  if (available_kb == 0) GTEST_SKIP() << "/proc/meminfo has no MemAvailable";
  ASSERT_EQ(std::getenv("BOOSTER_ASYNC_STAGING_MB"), nullptr);
  const double half = double(available_kb) * 1024 / 2, got = double(ckpt::default_staging_bytes());
  EXPECT_NEAR(got, half, 0.1 * half) << "half of MemAvailable, read a moment earlier";
  setenv("BOOSTER_ASYNC_STAGING_MB", "3", 1);
  EXPECT_EQ(ckpt::default_staging_bytes(), size_t(3) << 20);
  unsetenv("BOOSTER_ASYNC_STAGING_MB");
}

}  // namespace
