// ProcessGroupMesh: ranks laid out on named axes, outermost first. (dp, pp, tp) by default
// with tp innermost (Colossal-AI's dp_outside = True), so a tensor-parallel group is
// consecutive ranks. Groups along every subset of axes are created once, eagerly (MPI
// splits are collective, so creating them lazily could deadlock ranks that ask in
// different orders), and cached.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/dist/process_group.h"

namespace booster::dist {

class ProcessGroupMesh {
 public:
  /// Axes outermost first, e.g. {{"dp", 2}, {"pp", 1}, {"tp", 2}}; one size may be -1
  /// (inferred from the world size). The product must equal the world size.
  explicit ProcessGroupMesh(std::vector<std::pair<std::string, int>> axes);
  /// (dp, pp, tp) with dp outermost, or (pp, dp, tp) when dp_outside is false.
  static ProcessGroupMesh dp_pp_tp(int dp, int pp, int tp, bool dp_outside = true);

  const std::vector<std::string>& axis_names() const { return names_; }
  /// Size of an axis.
  int size(const std::string& axis) const;
  /// Coordinates of a world rank (this rank by default), one per axis.
  std::vector<int> coordinate(int rank = -1) const;
  /// This rank's coordinate on one axis.
  int coordinate(const std::string& axis) const;
  /// World rank at coordinates.
  int rank_of(const std::vector<int>& coord) const;
  /// This rank's group along one axis.
  const ProcessGroup& group(const std::string& axis) const { return group(std::vector<std::string>{axis}); }
  /// This rank's group spanning several axes (e.g. {"dp", "tp"}).
  const ProcessGroup& group(const std::vector<std::string>& axes) const;
  /// World ranks of the group of any `rank` along `axes`, in group order.
  std::vector<int> group_ranks(const std::vector<std::string>& axes, int rank) const;

 private:
  size_t axis_index(const std::string& name) const;
  uint32_t mask_of(const std::vector<std::string>& axes) const;
  std::vector<std::string> names_;
  std::vector<int> sizes_;
  std::map<uint32_t, GroupPtr> groups_;
};

}  // namespace booster::dist
