// What causal language models (GPT-2, LLaMA) share: their output and transformers' shifted
// loss, a key/value cache so each generated token costs one position's work, and
// transformers' generate() sampling (temperature, top_k; greedy at temperature 0), with
// nanoGPT's crop of the context to the model's positions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/common/check.h"
#include "core/tensor/tensor.h"
#include "core/tensor/tensor_map.h"
#include "nn/batch_split.h"
#include "nn/layers.h"

namespace booster::nn {

/// Output of a causal language model.
struct CausalLMOutput {
  Tensor logits;  // [B, T, vocab_size]
  Tensor loss;    // [] mean over the shifted labels that count; undefined without labels
  int64_t loss_tokens = 0;  // the labels the loss counted (not -100)
};
inline void visit_tensors(CausalLMOutput& o, const std::function<void(Tensor&)>& f) {
  if (o.logits.defined()) f(o.logits);
  if (o.loss.defined()) f(o.loss);
}

/// How an output combines over split_batch's shares: the logits' rows joined, the loss the
/// shares' means weighted by the labels each counted, so the combined loss is the whole
/// batch's token mean however the -100 labels fall.
inline std::vector<BatchMerge> batch_merge(const CausalLMOutput& o) { return logits_loss_merge(o.logits, o.loss); }
inline double batch_weight(const CausalLMOutput& o) { return double(o.loss_tokens); }
inline void set_batch_weight(CausalLMOutput& o, double w) { o.loss_tokens = int64_t(w); }

class VocabParallelHead;

/// The loss of logits [B, T, V] against targets aligned with them [B, T] (position t predicts
/// targets[t], as nanoGPT's y; -100 ignored): cross entropy, or, when `head` is a
/// vocabulary-parallel head whose logits stay split (parallel_output), the vocabulary-parallel
/// cross entropy of this rank's columns.
Tensor lm_token_loss(const VocabParallelHead* head, const Tensor& logits, const Tensor& targets);
/// transformers' shifted loss of out.logits: position t predicts labels[t + 1] (-100
/// ignored); labels shaped as input_ids [B, T] (`model` names the model in errors). Sets
/// out.loss and out.loss_tokens.
void causal_lm_loss(CausalLMOutput& out, const VocabParallelHead* head, const Tensor& labels, const Tensor& input_ids,
                    const char* model);
/// Whole logits [..., V] of a head's output (gathered when `head` keeps them split).
Tensor whole_logits(const VocabParallelHead* head, const Tensor& logits);
/// The vocabulary-parallel head of a causal LM (its tied embeddings, or root's "lm_head"), or
/// null when the head is whole.
const VocabParallelHead* vocab_parallel_head(Module& root, Embedding& embeddings, bool tied);

/// transformers' past_key_values: each layer's keys and values so far, [B, kv heads, L, d].
struct KVCache {
  std::vector<Tensor> keys, values;
  /// Tokens cached (0 when empty).
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
  /// Layer i's entries (the cache grows to n layers on first use).
  Tensor& key(size_t i, size_t n);
  Tensor& value(size_t i, size_t n);
};

/// Appends k and v ([B, h, t, d] views) to a layer's cache and returns the layer's whole
/// keys and values; with an empty cache these are k and v themselves.
std::pair<Tensor, Tensor> extend_cache(Tensor& keys, Tensor& values, const Tensor& k, const Tensor& v);

/// Attention of t new queries q [B, h, t, d] over the cached keys and values [B, h, L, d]
/// whose last t are the queries' own: causal_attention when nothing came before them (L = t),
/// unmasked attention for one query after a cache; several queries after a cache are refused.
Tensor cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, double scale);

/// A causal LM's head on hidden [B, T, E] -> logits [B, T, V]: tied, the token embedding
/// table as its weight, inside a forward of that module (so whatever hooks it, ZeRO-3
/// gathering its shard or FSDP's unit, sees this use too); else root's "lm_head" module.
Tensor lm_head_logits(Module& root, Embedding& embeddings, bool tied, const Tensor& hidden);
/// The same head's mean loss against targets [B, T] aligned with hidden (-100 ignored)
/// without whole logits (linear_cross_entropy), inside the head module's forward as
/// lm_head_logits; undefined when the head is not one it fuses (a LoRA-wrapped or biased
/// lm_head): the caller then takes logits.
Tensor lm_head_loss(Module& root, Embedding& embeddings, bool tied, const Tensor& hidden, const Tensor& targets);

/// x through every layer of `layers` (each a Layer with forward_cached(x, keys, values)),
/// each with its entry of the cache; `path` names the list in errors ("transformer.h").
template <typename Layer>
Tensor forward_layers_cached(const ModuleList<UnaryModule>& layers, Tensor x, KVCache& cache, const char* path) {
  const size_t n = layers.size();
  for (size_t i = 0; i < n; ++i) {
    auto* layer = dynamic_cast<Layer*>(layers.at(i).get());
    BOOSTER_CHECK(layer, "generating with a cache needs the model's own layers, ", path, ".", i, " is ",
                  layers.at(i)->type_name());
    x = layer->forward_cached(x, cache.key(i, n), cache.value(i, n));
  }
  return x;
}

/// A model generate() can drive.
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /// Logits [B, t, V] of input_ids [B, t] that follow the cache's tokens; the cache is
  /// extended by them. Positions start at cache.length().
  virtual Tensor forward_cached(const Tensor& input_ids, KVCache& cache) = 0;
  /// Most positions a forward takes (n_positions, max_position_embeddings).
  virtual int64_t max_positions() const = 0;
  /// Tokens the model knows (its config's vocab_size).
  virtual int64_t vocab_size() const = 0;
  /// The loss of the model's logits against targets aligned with them (lm_token_loss with
  /// the model's head: the criterion of a loop whose labels are already shifted, nanoGPT's).
  virtual Tensor token_loss(const Tensor& logits, const Tensor& targets) = 0;
  /// Hugging Face's gradient_checkpointing_enable(): the layers run checkpointed while
  /// training (ratio: the share of each stage's layers, the first ones).
  virtual void gradient_checkpointing_enable(double ratio = 1.0) = 0;

  /// Liger's fused_linear_cross_entropy: while the model trains with gradients, a forward on
  /// named inputs holding "labels" (targets aligned with input_ids, as a token stream's and
  /// token_loss take them) returns the head's loss as "loss" instead of "logits", the logits
  /// made and consumed a block of rows at a time (lm_head_loss). Off: "logits" as ever.
  bool fused_linear_cross_entropy = false;
};

/// A causal LM's last-stage outputs on hidden [B, T, E] (after its final norm): {"loss"}
/// where `lm` fuses the head with its loss (fused_linear_cross_entropy, training with
/// gradients, "labels" among inputs, a head lm_head_loss fuses), else {"logits"}.
TensorMap lm_stage_outputs(Module& root, CausalLM& lm, Embedding& embeddings, bool tied, const Tensor& hidden,
                           const TensorMap& inputs);

/// transformers' generate() arguments (sampling on, as nanoGPT's generate).
struct GenerateOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // logits divided by it; 0: the most likely token (greedy)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  uint64_t seed = 1337;      // the draws' generator
  bool use_cache = true;     // false: every token recomputes the whole context (the reference)
};

/// input_ids [B, T] i64 -> [B, T + max_new_tokens]: each new token drawn from the last
/// position's logits. A context longer than max_positions() is cropped to its last
/// max_positions() tokens (nanoGPT's generate), which recomputes the cache. Runs without
/// gradients; the caller puts the model in eval mode (the models' generate() members do).
Tensor generate(CausalLM& model, const Tensor& input_ids, const GenerateOptions& o = {});
/// generate with `module` (the model itself) in eval mode, its mode restored after.
Tensor generate_in_eval(Module& module, CausalLM& model, const Tensor& input_ids, const GenerateOptions& o);

}  // namespace booster::nn
