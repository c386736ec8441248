// Mesh coordinates and the eager group creation.
#include "core/dist/mesh.h"

#include "core/dist/runtime.h"
#include "core/common/check.h"

namespace booster::dist {

ProcessGroupMesh::ProcessGroupMesh(std::vector<std::pair<std::string, int>> axes) {
  BOOSTER_CHECK(!axes.empty() && axes.size() <= 8, "ProcessGroupMesh: need 1 to 8 axes");
  const int world = world_size();
  int known = 1, infer = -1;
  for (size_t i = 0; i < axes.size(); ++i) {
    names_.push_back(axes[i].first);
    sizes_.push_back(axes[i].second);
    if (axes[i].second == -1) {
      BOOSTER_CHECK(infer < 0, "ProcessGroupMesh: only one axis size may be -1");
      infer = int(i);
    } else {
      BOOSTER_CHECK(axes[i].second > 0, "ProcessGroupMesh: axis '", axes[i].first, "' has size ", axes[i].second);
      known *= axes[i].second;
    }
  }
  if (infer >= 0) {
    BOOSTER_CHECK(world % known == 0, "ProcessGroupMesh: world size ", world, " is not divisible by ", known);
    sizes_[size_t(infer)] = world / known;
  }
  int prod = 1;
  std::string shape;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    prod *= sizes_[i];
    shape += (i ? " x " : "") + names_[i] + "=" + std::to_string(sizes_[i]);
  }
  BOOSTER_CHECK(prod == world, "ProcessGroupMesh: ", shape, " holds ", prod, " ranks, but the world has ", world);
  const auto me = coordinate(world_rank());
  const uint32_t full = (1u << names_.size()) - 1;
  for (uint32_t mask = 1; mask <= full; ++mask) {
    // Ranks sharing the coordinates outside `mask` form one group; color = those coords.
    int color = 0, key = 0;
    std::string name;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (mask & (1u << i)) {
        key = key * sizes_[i] + me[i];
        name += (name.empty() ? "" : "x") + names_[i];
      } else {
        color = color * sizes_[i] + me[i];
      }
    }
    groups_[mask] = split_group(ProcessGroup::world(), color, key, name);
  }
}

ProcessGroupMesh ProcessGroupMesh::dp_pp_tp(int dp, int pp, int tp, bool dp_outside) {
  if (dp_outside) return ProcessGroupMesh({{"dp", dp}, {"pp", pp}, {"tp", tp}});
  return ProcessGroupMesh({{"pp", pp}, {"dp", dp}, {"tp", tp}});
}

size_t ProcessGroupMesh::axis_index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return i;
  std::string known;
  for (auto& n : names_) known += (known.empty() ? "" : ", ") + n;
  BOOSTER_THROW(ValueError, "ProcessGroupMesh: no axis '", name, "' (axes: ", known, ")");
}

uint32_t ProcessGroupMesh::mask_of(const std::vector<std::string>& axes) const {
  uint32_t m = 0;
  for (auto& a : axes) m |= 1u << axis_index(a);
  BOOSTER_CHECK(m != 0, "ProcessGroupMesh: no axes given");
  return m;
}

int ProcessGroupMesh::size(const std::string& axis) const { return sizes_[axis_index(axis)]; }

std::vector<int> ProcessGroupMesh::coordinate(int rank) const {
  if (rank < 0) rank = world_rank();
  std::vector<int> c(sizes_.size());
  for (int i = int(sizes_.size()) - 1; i >= 0; --i) {
    c[size_t(i)] = rank % sizes_[size_t(i)];
    rank /= sizes_[size_t(i)];
  }
  return c;
}

int ProcessGroupMesh::coordinate(const std::string& axis) const { return coordinate()[axis_index(axis)]; }

int ProcessGroupMesh::rank_of(const std::vector<int>& coord) const {
  BOOSTER_CHECK(coord.size() == sizes_.size(), "ProcessGroupMesh: ", coord.size(), " coordinates for ", sizes_.size(),
                " axes");
  int r = 0;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    BOOSTER_CHECK(coord[i] >= 0 && coord[i] < sizes_[i], "ProcessGroupMesh: coordinate ", coord[i], " out of range for axis '",
                  names_[i], "' of size ", sizes_[i]);
    r = r * sizes_[i] + coord[i];
  }
  return r;
}

const ProcessGroup& ProcessGroupMesh::group(const std::vector<std::string>& axes) const {
  return *groups_.at(mask_of(axes));
}

std::vector<int> ProcessGroupMesh::group_ranks(const std::vector<std::string>& axes, int rank) const {
  const uint32_t m = mask_of(axes);
  const auto base = coordinate(rank);
  std::vector<int> out;
  // Enumerate the axes in the mask, outermost first, varying the innermost fastest.
  std::vector<size_t> idx;
  for (size_t i = 0; i < names_.size(); ++i)
    if (m & (1u << i)) idx.push_back(i);
  int count = 1;
  for (size_t i : idx) count *= sizes_[i];
  for (int k = 0; k < count; ++k) {
    auto c = base;
    int rem = k;
    for (int j = int(idx.size()) - 1; j >= 0; --j) {
      c[idx[size_t(j)]] = rem % sizes_[idx[size_t(j)]];
      rem /= sizes_[idx[size_t(j)]];
    }
    out.push_back(rank_of(c));
  }
  return out;
}

}  // namespace booster::dist
