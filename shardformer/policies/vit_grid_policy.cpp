// The ViT policy on 2D, 2.5D and 3D grids (see vit_grid_policy.h).
#include "shardformer/policies/vit_grid_policy.h"

#include "core/dist/functional.h"
#include "nn/parallel/dropout.h"
#include "nn/parallel/grid_layers.h"
#include "nn/parallel/linear_1d.h"
#include "nn/vit.h"

namespace booster::shardformer {

namespace {

// CLS token and position embeddings as blocks of the features, beside the grid's patch
// projection: [B, C, H, W] -> [B / row_blocks, N + 1, hidden / f].
class GridViTEmbeddings : public nn::ViTEmbeddings {
 public:
  GridViTEmbeddings(const nn::ViTConfig& c, Tensor cls, Tensor pos, std::shared_ptr<nn::UnaryModule> patch,
                    std::shared_ptr<nn::UnaryModule> drop, const nn::TensorGrid& grid)
      : ViTEmbeddings(c, std::move(cls), std::move(pos), std::move(patch), std::move(drop)), grid_(grid) {}
  std::string type_name() const override { return nn::grid_type_name(grid_, "ViTEmbeddings"); }
  Tensor forward(const Tensor& pixel_values) override {
    Tensor patches = patch_embeddings(pixel_values);  // [B / r, N, hidden / f]
    const auto& L = grid_.layout();
    Tensor cls = dist::reduce_backward(cls_token, *L.rows);
    cls = cls.expand({patches.size(0), 1, cls.size(2)});
    Tensor x = concat({cls.to(patches.dtype()), patches}, 1);
    return dropout(add(x, dist::reduce_backward(position_embeddings, *L.rows).to(x.dtype())));
  }

 protected:
  std::shared_ptr<Module> fresh() const override {
    return std::make_shared<GridViTEmbeddings>(c_, Tensor(), Tensor(), std::make_shared<nn::Identity>(),
                                               std::make_shared<nn::Identity>(), grid_);
  }
  const nn::TensorGrid& grid_;
};

const nn::TensorGrid& grid_of(const ShardConfig& c) {
  BOOSTER_CHECK(c.grid != nullptr, "ShardConfig: no tensor-parallel grid");
  return *c.grid;
}

ModuleFactory grid_linear(bool from_residual) {
  return [from_residual](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    const auto& g = grid_of(c);
    const auto& first = g.linear(g.layout());
    return nn::GridLinear::from_native_module(m, g, from_residual ? first : g.linear(first.out));
  };
}

ModuleFactory grid_layernorm() {
  return [](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
    return nn::GridLayerNorm::from_native_module(m, grid_of(c));
  };
}

// Every activation block is this rank's own: dropout draws per rank.
ModuleFactory grid_dropout(bool only_if_active) {
  return [only_if_active](const std::shared_ptr<nn::Module>& m, const ShardConfig& c) -> std::shared_ptr<nn::Module> {
    auto* d = dynamic_cast<nn::Dropout*>(m.get());
    if (only_if_active && d && d->p() == 0.0) return m;  // the fused attention kernel stays
    return nn::TPDropout::from_native_module(m, c.parallel_generator, true);
  };
}

std::shared_ptr<nn::Module> grid_embeddings(const std::shared_ptr<nn::Module>& m, const ShardConfig& c) {
  if (std::dynamic_pointer_cast<GridViTEmbeddings>(m)) return m;
  auto* e = dynamic_cast<nn::ViTEmbeddings*>(m.get());
  BOOSTER_CHECK(e != nullptr, "ViT grid policy: expects ViTEmbeddings, got a ", m->type_name());
  const auto& g = grid_of(c);
  const auto& L = g.layout();
  for (Tensor t : {e->cls_token.get(), e->position_embeddings.get()})
    nn::shard_parameter_blocks(t, {{2, {L.feature_block(), L.feature_blocks()}}},
                               nn::grid_type_name(g, "PatchEmbedding") + " (" + g.describe() + ")");
  auto patch = e->patch_embeddings.shared();
  patch->replace("projection", nn::GridPatchProjection::from_native_module(patch->get("projection"), g));
  auto drop = grid_dropout(false)(e->dropout.shared(), c);
  return std::make_shared<GridViTEmbeddings>(e->config(), e->cls_token.get(),
                                             e->position_embeddings.get(), std::static_pointer_cast<nn::UnaryModule>(patch),
                                             std::static_pointer_cast<nn::UnaryModule>(drop), g);
}

}  // namespace

void vit_grid_sanity_check(const nn::ViTConfig& c, const nn::TensorGrid& g, const std::string& who) {
  const int64_t f = g.feature_blocks(), in = g.in_blocks();
  const std::string grid = g.describe();
  BOOSTER_CHECK(c.num_attention_heads % f == 0, who, ": num_attention_heads ", c.num_attention_heads,
                " does not divide into the ", grid, "'s ", f, " feature blocks");
  BOOSTER_CHECK(c.hidden_size % in == 0, who, ": hidden_size ", c.hidden_size, " does not divide into the ", grid, "'s ",
                in, " weight blocks");
  BOOSTER_CHECK(c.intermediate_size % in == 0, who, ": intermediate_size ", c.intermediate_size,
                " does not divide into the ", grid, "'s ", in, " weight blocks");
}

std::map<std::string, ModulePolicyDescription> vit_grid_module_policy(const nn::ViTConfig& c, const ShardConfig& config) {
  const auto& g = grid_of(config);
  const int64_t f = g.feature_blocks();
  std::map<std::string, ModulePolicyDescription> p;
  p["ViTModel"].sub_module_replacement = {{"embeddings", grid_embeddings}, {"layernorm", grid_layernorm()}};
  auto& layer = p["ViTLayer"];
  layer.attribute_replacement = {{"attention.attention.num_attention_heads", int64_t(c.num_attention_heads / f)},
                                 {"attention.attention.all_head_size", int64_t(c.hidden_size / f)}};
  layer.sub_module_replacement = {
      {"layernorm_before", grid_layernorm()},
      {"attention.attention.query", grid_linear(true)},
      {"attention.attention.key", grid_linear(true)},
      {"attention.attention.value", grid_linear(true)},
      {"attention.attention.dropout", grid_dropout(true)},
      {"attention.output.dense", grid_linear(false)},
      {"attention.output.dropout", grid_dropout(false)},
      {"layernorm_after", grid_layernorm()},
      {"intermediate.dense", grid_linear(true)},
      {"output.dense", grid_linear(false)},
      {"output.dropout", grid_dropout(false)},
  };
  if (c.num_labels > 0)
    p["ViTForImageClassification"].sub_module_replacement = {
        {"classifier", [](const std::shared_ptr<nn::Module>& m, const ShardConfig& sc) {
           return nn::GridClassifier::from_native_module(m, grid_of(sc));
         }}};
  return p;
}

}  // namespace booster::shardformer
