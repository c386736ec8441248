// The ViT shardformer policy (see vit_policy.h).
#include "shardformer/policies/vit_policy.h"

#include <spdlog/spdlog.h>

#include "core/dist/functional.h"
#include "core/dist/runtime.h"
#include "nn/parallel/sequence_split.h"
#include "nn/parallel/ulysses_attention.h"
#include "nn/vit.h"
#include "shardformer/policies/factories.h"
#include "shardformer/policies/vit_grid_policy.h"

namespace booster::shardformer {

namespace {

const nn::ViTConfig& vit_config(const nn::Module& model) {
  auto* vit = dynamic_cast<const nn::ViTForImageClassification*>(&model);
  BOOSTER_CHECK(vit != nullptr, "ViTForImageClassificationPolicy: expects a ViTForImageClassification, got a ",
                model.type_name(), " (write a Policy for it and pass it as custom_policy)");
  return vit->config();
}

// Sequence parallelism's encoder: the tokens are split over the group on the way in
// (balanced: 197 over 2 is 99 and 98) and gathered on the way out (nn::SequenceSplit: under
// Ulysses the group's ranks are data parallel too); the layers in between run on token shards.
class SequenceParallelViTEncoder : public nn::ViTEncoder {
 public:
  SequenceParallelViTEncoder(const nn::ViTConfig& c, std::shared_ptr<nn::ModuleList<nn::UnaryModule>> layers,
                             std::shared_ptr<nn::SequenceSplit> split)
      : ViTEncoder(c, std::move(layers)), split_(std::move(split)) {}
  std::string type_name() const override { return "SequenceParallelViTEncoder"; }
  // hidden: [B, T, H] (replicated) -> [B, T, H] (replicated); a share of the T tokens inside
  Tensor forward(const Tensor& hidden) override {
    Tensor h = split_->split_tokens(hidden, "SequenceParallelViTEncoder", false);
    h = forward_layers(h, 0, int64_t(layer->size()));
    return split_->gather_tokens(h, hidden.size(1));
  }

 protected:
  std::shared_ptr<Module> fresh() const override {
    return std::make_shared<SequenceParallelViTEncoder>(c_, std::make_shared<nn::ModuleList<nn::UnaryModule>>(), split_);
  }
  std::shared_ptr<nn::SequenceSplit> split_;
};

}  // namespace

void ViTPolicy::config_sanity_check(const nn::Module& model, const ShardConfig& config) const {
  const auto& c = vit_config(model);
  if (config.grid) {
    BOOSTER_CHECK(!config.enable_sequence_parallelism, name(), ": sequence parallelism runs with 1D tensor parallelism; "
                  "the ", config.grid->describe(), " partitions the activations itself");
    return vit_grid_sanity_check(c, *config.grid, name());
  }
  const int tp = config.tp_size();
  if (config.ulysses()) {
    const int sp = config.sp_group().size();
    BOOSTER_CHECK(tp == 1, name(), ": Ulysses (sequence_parallelism_mode all_to_all) runs on whole weights here; "
                  "the tensor-parallel size must be 1, got ", tp);
    BOOSTER_CHECK(c.num_attention_heads % sp == 0, name(), ": num_attention_heads ", c.num_attention_heads,
                  " does not divide over the sequence-parallel group of ", sp, " (Ulysses scatters the heads)");
    BOOSTER_CHECK(c.num_patches() + 1 >= sp, name(), ": ", c.num_patches() + 1, " tokens over ", sp,
                  " sequence-parallel ranks leave a rank without any");
    return;
  }
  BOOSTER_CHECK(c.num_attention_heads % tp == 0, name(), ": num_attention_heads ", c.num_attention_heads,
                " does not divide by tp_size ", tp);
  BOOSTER_CHECK(c.intermediate_size % tp == 0, name(), ": intermediate_size ", c.intermediate_size,
                " does not divide by tp_size ", tp);
  BOOSTER_CHECK(!config.sequence_overlap() || config.sequence_parallelism_mode != "split_gather", name(),
                ": enable_sequence_overlap is not supported for ViT (its sequence-parallel LayerNorm gathers the "
                "tokens before the linears and its shards are uneven, 197 tokens); use split_gather without it");
  BOOSTER_CHECK(!config.enable_sequence_parallelism || config.sequence_parallelism_mode == "split_gather", name(),
                ": sequence_parallelism_mode '", config.sequence_parallelism_mode,
                "' is not supported for ViT", config.ring_attn() ? " (ring_attn is ring attention for causal language "
                "models, over a zigzag split into 2 x sp_size equal chunks; the ViT's tokens attend both ways)"
                : config.sequence_overlap() ? " (ring overlaps the gather inside the column-parallel linears; the ViT's "
                "sequence-parallel LayerNorm gathers the tokens before them, and its 197 tokens split unevenly)" : "",
                "; use split_gather or all_to_all");
}

std::map<std::string, ModulePolicyDescription> ViTPolicy::module_policy(const nn::Module& model,
                                                                         const ShardConfig& config) const {
  const auto& c = vit_config(model);
  if (config.grid) return vit_grid_module_policy(c, config);
  const int tp = config.tp_size();
  const bool sp = config.enable_sequence_parallelism;
  const int64_t tokens = c.num_patches() + 1;
  std::map<std::string, ModulePolicyDescription> p;
  if (config.ulysses()) {  // whole weights; the attention exchanges heads for tokens
    p["ViTLayer"].sub_module_replacement = {{"attention.attention", [tokens](const std::shared_ptr<nn::Module>& m,
                                                                             const ShardConfig& sc) {
      return nn::UlyssesViTSelfAttention::from_native_module(m, sc.sp_group(), tokens);
    }}};
    return p;
  }
  p["ViTEmbeddings"].sub_module_replacement = {{"dropout", dropout(false)}};

  auto& layer = p["ViTLayer"];
  layer.attribute_replacement = {{"attention.attention.num_attention_heads", int64_t(c.num_attention_heads / tp)},
                                 {"attention.attention.all_head_size", int64_t(c.hidden_size / tp)}};
  nn::Linear1DOptions col, rw;
  if (sp) {
    col.input_gathered = true;  // the LayerNorm before gathered the tokens
    rw.seq_parallel = true;
  }
  layer.sub_module_replacement = {
      {"attention.attention.query", column(col)},
      {"attention.attention.key", column(col)},
      {"attention.attention.value", column(col)},
      {"attention.output.dense", row(rw)},
      {"attention.output.dropout", dropout(sp)},
      {"intermediate.dense", column(col)},
      {"output.dense", row(rw)},
      {"output.dropout", dropout(sp)},
  };
  if (sp) {
    layer.sub_module_replacement.push_back({"layernorm_before", sp_layernorm(tokens)});
    layer.sub_module_replacement.push_back({"layernorm_after", sp_layernorm(tokens)});
  }
  if (c.num_labels > 0 && c.num_labels % tp == 0) {
    nn::Linear1DOptions head;
    head.gather_output = true;
    p["ViTForImageClassification"].sub_module_replacement = {{"classifier", column(head)}};
  } else if (c.num_labels > 0 && tp > 1 && dist::world_rank() == 0) {
    spdlog::info("{}: num_labels {} does not divide by tp_size {}; the classifier stays whole on every rank", name(),
                 c.num_labels, tp);
  }
  return p;
}

void ViTPolicy::postprocess(nn::Module& model, const ShardConfig& config) const {
  if (!config.enable_sequence_parallelism) return;
  auto* vit = dynamic_cast<nn::ViTForImageClassification*>(&model);
  auto& enc = *vit->vit->encoder;
  if (dynamic_cast<SequenceParallelViTEncoder*>(&enc)) return;
  auto sp = std::make_shared<SequenceParallelViTEncoder>(
      vit->config(), std::static_pointer_cast<nn::ModuleList<nn::UnaryModule>>(enc.layer.shared()), config.token_split());
  sp->gradient_checkpointing = enc.gradient_checkpointing;  // the same layers run checkpointed as before
  sp->gradient_checkpointing_ratio = enc.gradient_checkpointing_ratio;
  model.replace("vit.encoder", sp);
}

}  // namespace booster::shardformer
