// The layerwise runtime's parts. LayerGroups: Galvatron's rank layout, stages of W / pp
// consecutive ranks and, inside a stage, for every distinct (tensor-parallel degree,
// consecutive or strided) of the plan one tensor-parallel and one data-parallel group,
// created once for the whole run (Galvatron made a group per layer: PR #76's OOM).
// GalvatronLayer: a transformer layer run under its own strategy: its input rows are moved
// from the previous layer's layout to its own (dist::redistribute_rows), it runs (checkpointed
// when the plan says so; a Ulysses layer, or a tensor-parallel one under Megatron's sequence
// parallelism, on its group's balanced share of the tokens: split where a run of such layers
// of one group begins, gathered where it ends, handed on split in between), and the stage's
// last layer moves its output back to the layout the embeddings and the head use (vtp),
// which is also what travels between stages.
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "core/dist/process_group.h"
#include "core/dist/redistribute.h"
#include "nn/module.h"

namespace booster::galvatron {

/// A tensor-parallel degree and whether its group is consecutive ranks; sp: the group runs
/// Ulysses instead (whole weights, data parallel over the whole stage, tokens split in it).
struct TpKey {
  int tp = 1;
  bool consec = true;
  bool sp = false;
  auto operator<=>(const TpKey&) const = default;
  /// The key of its groups (Ulysses uses the tensor-parallel group of the same ranks).
  TpKey groups() const { return {tp, consec, false}; }
};

class LayerGroups {
 public:
  /// Collective over the world: the stage groups, the pipeline groups and the groups of
  /// every key (each made once, in the same order on every rank).
  LayerGroups(int pp, const std::set<TpKey>& keys);
  int stage_size() const { return stage_size_; }
  int stage_index() const { return stage_index_; }
  int local_rank() const { return local_; }
  /// The ranks of this stage (group rank = local rank).
  const dist::ProcessGroup& stage() const { return *stage_; }
  /// The ranks of this local rank over the stages (stage order).
  const dist::ProcessGroup& pp() const { return *pp_; }
  const dist::ProcessGroup& tp(TpKey k) const;
  const dist::ProcessGroup& dp(TpKey k) const;
  /// Data-parallel slices of the batch under a key: stage size / tp.
  int dp_size(TpKey k) const { return stage_size_ / k.tp; }
  /// Ranks its gradients are averaged over: dp_size, the whole stage under Ulysses (each
  /// rank's gradient is its tokens' part).
  int reduce_size(TpKey k) const { return k.sp ? stage_size_ : dp_size(k); }
  /// The rows of a batch of `batch` rows each local rank holds under a key.
  dist::RowLayout rows(TpKey k, int64_t batch) const { return dist::tp_row_layout(batch, stage_size_, k.tp, k.consec); }

 private:
  int stage_size_, stage_index_, local_;
  dist::GroupPtr stage_, pp_;
  std::map<TpKey, std::pair<dist::GroupPtr, dist::GroupPtr>> groups_;
};

/// How a layer holds the tokens: whole, or its group's balanced share (split), arriving so
/// from the layer before and leaving so for the layer after when both are split over the
/// same group. `tokens`: the whole count, shared along such a run (its first layer sets it
/// for its last, which gathers).
struct TokenSplit {
  bool split = false;
  bool arrives_split = false;
  bool leaves_split = false;
  std::shared_ptr<int64_t> tokens;
};

class GalvatronLayer : public nn::UnaryModule {
 public:
  /// Runs `inner` under `own` after moving its input from `in`; `out`: where the stage's last
  /// layer leaves its output. The inner layer's children and parameters are registered here
  /// under their own names (the parameter names do not change).
  /// tokens: whether the layer runs on its group's balanced share of the tokens (Ulysses, or
  /// Megatron's sequence parallelism of a tensor-parallel layer) and how it gets and leaves them.
  GalvatronLayer(std::shared_ptr<nn::UnaryModule> inner, std::shared_ptr<const LayerGroups> groups, TpKey in,
                 TpKey own, std::optional<TpKey> out, bool checkpoint, TokenSplit tokens);
  std::string type_name() const override { return "GalvatronLayer"; }
  /// x: [rows of `in`, ...] -> [rows of `out` (or `own`), ...]
  Tensor forward(const Tensor& x) override;
  nn::UnaryModule& inner() const { return *inner_; }

 protected:
  std::shared_ptr<Module> fresh() const override;

 private:
  std::shared_ptr<nn::UnaryModule> inner_;
  std::shared_ptr<const LayerGroups> groups_;
  TpKey in_, own_;
  std::optional<TpKey> out_;
  bool checkpoint_;
  TokenSplit tokens_;
};

}  // namespace booster::galvatron
