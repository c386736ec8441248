// Mesh coordinates and group membership for every layout the world size allows.
#include <gtest/gtest.h>

#include "booster/dist_coordinator.h"
#include "core/dist/collectives.h"
#include "core/dist/mesh.h"
#include "core/dist/runtime.h"

using namespace booster;
using namespace booster::dist;

namespace {

std::vector<std::vector<int>> layouts() {
  const int n = world_size();
  std::vector<std::vector<int>> all{{1, 2, 2}, {2, 1, 2}, {2, 2, 1}, {1, 4, 1}, {4, 1, 1}, {1, 1, 4},
                                    {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {1, 1, 1}};
  std::vector<std::vector<int>> out;
  for (auto& l : all)
    if (l[0] * l[1] * l[2] == n) out.push_back(l);
  return out;
}

}  // namespace

TEST(Mesh, CoordinatesAndGroups) {
  for (auto& l : layouts()) {
    SCOPED_TRACE("dp=" + std::to_string(l[0]) + " pp=" + std::to_string(l[1]) + " tp=" + std::to_string(l[2]));
    auto mesh = ProcessGroupMesh::dp_pp_tp(l[0], l[1], l[2]);
    const int me = world_rank();
    const auto c = mesh.coordinate();
    // tp innermost: rank = (dp * pp_size + pp) * tp_size + tp
    EXPECT_EQ(me, (c[0] * l[1] + c[1]) * l[2] + c[2]);
    EXPECT_EQ(mesh.rank_of(c), me);
    for (const std::string axis : {"dp", "pp", "tp"}) {
      const ProcessGroup& g = mesh.group(axis);
      EXPECT_EQ(g.size(), mesh.size(axis));
      EXPECT_EQ(g.rank(), mesh.coordinate(axis));
      EXPECT_EQ(g.ranks(), mesh.group_ranks({axis}, me));
      // Members differ from me only along that axis.
      for (int r : g.ranks()) {
        auto rc = mesh.coordinate(r);
        for (size_t a = 0; a < 3; ++a) {
          if (mesh.axis_names()[a] != axis) {
            EXPECT_EQ(rc[a], c[a]);
          }
        }
      }
      // The group really communicates: summing ones gives its size.
      Tensor one = Tensor::ones({1});
      all_reduce(one, ReduceOp::sum, g);
      EXPECT_EQ(one.item(), double(g.size()));
    }
    const ProcessGroup& dptp = mesh.group(std::vector<std::string>{"dp", "tp"});
    EXPECT_EQ(dptp.size(), l[0] * l[2]);
    EXPECT_EQ(dptp.ranks(), mesh.group_ranks({"dp", "tp"}, me));
    if (l[2] > 1) {  // a tensor-parallel group is consecutive ranks
      auto tp = mesh.group("tp").ranks();
      for (size_t i = 1; i < tp.size(); ++i) EXPECT_EQ(tp[i], tp[i - 1] + 1);
    }
  }
}

TEST(Mesh, PpOutsideAndErrors) {
  const int n = world_size();
  auto mesh = ProcessGroupMesh::dp_pp_tp(n, 1, 1, /*dp_outside=*/false);
  EXPECT_EQ(mesh.axis_names()[0], "pp");
  EXPECT_EQ(mesh.group("dp").size(), n);
  EXPECT_THROW(ProcessGroupMesh({{"dp", n + 1}}), ValueError);
  EXPECT_THROW(mesh.group("zz"), ValueError);
  ProcessGroupMesh inferred({{"dp", -1}, {"tp", 1}});
  EXPECT_EQ(inferred.size("dp"), n);
}

TEST(Coordinator, Basics) {
  DistCoordinator c;
  EXPECT_EQ(c.rank(), world_rank());
  EXPECT_EQ(c.world_size(), world_size());
  EXPECT_EQ(c.is_master(), world_rank() == 0);
  int ran = 0;
  c.on_master_only([&] { ++ran; }, true);
  EXPECT_EQ(ran, c.is_master() ? 1 : 0);
  c.block_all();
  EXPECT_GE(omp_threads(), 1);
}

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/dist/logger.h"

TEST(Logger, RankInEveryLineAndFilePerRank) {
  const std::string dir = (std::filesystem::temp_directory_path() / "booster_log_test").string();
  dist::LogOptions o;
  o.level = "info";
  o.file_dir = dir;
  dist::configure_logging(o);
  dist::logger().info("hello from the test");
  dist::logger().flush();
  std::ifstream f(dir + "/rank" + std::to_string(world_rank()) + ".log");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("[rank " + std::to_string(world_rank()) + "] [info] hello from the test"), std::string::npos)
      << ss.str();
  o.level = "loud";
  EXPECT_THROW(dist::configure_logging(o), ValueError);
  dist::configure_logging({});
}
