// Galvatron's groups and layer wrapper (see layerwise.h).
#include "plugins/galvatron/layerwise.h"

#include "core/common/check.h"
#include "core/dist/functional.h"
#include "core/dist/runtime.h"
#include "nn/activation_checkpoint.h"

namespace booster::galvatron {

namespace {
std::string key_name(TpKey k) { return (k.sp ? "sp" : "tp") + std::to_string(k.tp) + (k.consec ? "*" : ""); }
}  // namespace

LayerGroups::LayerGroups(int pp, const std::set<TpKey>& keys) {
  const auto& world = dist::ProcessGroup::world();
  const int w = world.size(), r = world.rank();
  BOOSTER_CHECK(pp >= 1 && w % pp == 0, "GalvatronPlugin: pp_deg ", pp, " does not divide the world size ", w);
  stage_size_ = w / pp;
  stage_index_ = r / stage_size_;
  local_ = r % stage_size_;
  stage_ = dist::split_group(world, stage_index_, local_, "galvatron stage " + std::to_string(stage_index_));
  pp_ = dist::split_group(world, local_, stage_index_, "galvatron pp " + std::to_string(local_));
  std::set<TpKey> made;  // a std::set: the same order on every rank
  for (const TpKey& k : keys) made.insert(k.groups());
  for (const TpKey& k : made) {
    BOOSTER_CHECK(k.tp >= 1 && stage_size_ % k.tp == 0, "GalvatronPlugin: tensor-parallel degree ", k.tp,
                  " does not divide the stage's ", stage_size_, " ranks");
    const int d = stage_size_ / k.tp;
    const int slice = k.consec ? local_ / k.tp : local_ % d;  // the data-parallel index: which rows
    const int within = k.consec ? local_ % k.tp : local_ / d;  // the tensor-parallel index
    const std::string name = key_name(k) + " stage " + std::to_string(stage_index_);
    auto tp = dist::split_group(world, stage_index_ * stage_size_ + slice, within, "galvatron " + name + " tp " + std::to_string(slice));
    auto dp = dist::split_group(world, stage_index_ * stage_size_ + within, slice, "galvatron " + name + " dp " + std::to_string(within));
    groups_[k] = {tp, dp};
  }
}

const dist::ProcessGroup& LayerGroups::tp(TpKey k) const {
  auto it = groups_.find(k.groups());
  BOOSTER_CHECK(it != groups_.end(), "GalvatronPlugin: no group was made for ", key_name(k));
  return *it->second.first;
}

const dist::ProcessGroup& LayerGroups::dp(TpKey k) const {
  if (k.sp) return *stage_;
  auto it = groups_.find(k);
  BOOSTER_CHECK(it != groups_.end(), "GalvatronPlugin: no group was made for ", key_name(k));
  return *it->second.second;
}

GalvatronLayer::GalvatronLayer(std::shared_ptr<nn::UnaryModule> inner, std::shared_ptr<const LayerGroups> groups,
                               TpKey in, TpKey own, std::optional<TpKey> out, bool checkpoint, TokenSplit tokens)
    : inner_(std::move(inner)),
      groups_(std::move(groups)),
      in_(in),
      own_(own),
      out_(out),
      checkpoint_(checkpoint),
      tokens_(std::move(tokens)) {
  BOOSTER_CHECK(!tokens_.split || (own.tp > 1 && tokens_.tokens), "GalvatronLayer: a token-split layer needs a group "
                "of 2 ranks or more and its run's token count");
  BOOSTER_CHECK(tokens_.split || (!tokens_.arrives_split && !tokens_.leaves_split),
                "GalvatronLayer: only a token-split layer hands tokens on split");
  BOOSTER_CHECK(!tokens_.leaves_split || !out_, "GalvatronLayer: the stage's last layer leaves its tokens whole");
  for (auto& [name, child] : inner_->named_children()) register_module(name, child);
  for (auto& [name, p] : inner_->named_parameters(false)) register_parameter(name, p, p.requires_grad());
  for (auto& [name, b] : inner_->named_buffers(false)) register_buffer(name, b);
}

Tensor GalvatronLayer::forward(const Tensor& x) {
  const auto& g = *groups_;
  const int64_t batch = x.size(0) * g.dp_size(in_);  // the stage's micro-batch
  // A row's gradient is kept in proportion to the number of ranks its layer averages
  // gradients over, so that each layer's average over its own data-parallel group is the
  // batch mean.
  const double r_in = g.reduce_size(in_), r_own = g.reduce_size(own_);
  Tensor h = dist::redistribute_rows(x, g.rows(in_, batch), g.rows(own_, batch), g.stage(), r_in / r_own);
  if (tokens_.split && !tokens_.arrives_split) {  // a run begins: its share of the tokens
    *tokens_.tokens = h.size(1);
    h = dist::split_forward_gather_backward(h, 1, g.tp(own_), true);
  }
  Tensor y = checkpoint_ && is_training() ? nn::checkpoint(*inner_, h) : (*inner_)(h);
  if (tokens_.split && !tokens_.leaves_split) y = dist::gather_forward_split_backward(y, 1, g.tp(own_), *tokens_.tokens);
  if (!out_) return y;
  return dist::redistribute_rows(y, g.rows(own_, batch), g.rows(*out_, batch), g.stage(), r_own / g.reduce_size(*out_));
}

std::shared_ptr<nn::Module> GalvatronLayer::fresh() const {
  BOOSTER_THROW(ValueError, "GalvatronLayer: a layer boosted under a layerwise plan is not cloned (its groups are the "
                "run's); clone the model before booster.boost");
}

}  // namespace booster::galvatron
