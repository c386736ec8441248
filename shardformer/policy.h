// ShardFormer (Colossal-AI's shardformer): a Policy says, per module type, which
// sub-modules to replace by parallel ones and which attributes to change; the sharder walks
// a model and applies it in place. Replacements adopt the native parameter handles, so
// parameter names stay the full logical ones and checkpoints keep their keys. C++ has no
// method replacement: every forward is virtual, so replacing a module by a subclass that
// overrides forward does that job (a replacement's factory may wrap the native module).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/process_group.h"
#include "core/tensor/random.h"
#include "nn/module.h"
#include "nn/parallel/grid.h"
#include "nn/parallel/sequence_split.h"

namespace booster::shardformer {

/// What the policies shard with (Colossal-AI's ShardConfig, the fields used on a CPU).
struct ShardConfig {
  const dist::ProcessGroup* tensor_parallel_process_group = nullptr;
  /// all_to_all (Ulysses) and ring_attn: the group the tokens split over.
  const dist::ProcessGroup* sequence_parallel_process_group = nullptr;
  bool enable_sequence_parallelism = false;
  std::string sequence_parallelism_mode;  // "split_gather" (the default when enabled), "ring", "all_to_all" or "ring_attn"
  bool enable_sequence_overlap = false;   // split_gather overlapped: the same as mode "ring"
  bool parallel_output = true;  // vocabulary-parallel heads keep their logits split (false: gathered)
  int64_t make_vocab_size_divisible_by = 64;  // the vocabulary's padding, as Colossal-AI's
  /// 2D, 2.5D or 3D tensor parallelism: the grid the tp group is split into (null: 1D).
  const nn::TensorGrid* grid = nullptr;
  /// Dropout generators: the same stream on every tp rank (replicated activations) and a
  /// stream per tp rank (split activations).
  std::shared_ptr<Generator> replicated_generator, parallel_generator;

  const dist::ProcessGroup& tp_group() const;
  int tp_size() const { return tensor_parallel_process_group ? tensor_parallel_process_group->size() : 1; }
  /// Ulysses is on (sequence parallelism in mode all_to_all).
  bool ulysses() const { return enable_sequence_parallelism && sequence_parallelism_mode == "all_to_all"; }
  /// split_gather's linears move their shards round the tp group (mode ring, or split_gather
  /// with enable_sequence_overlap).
  bool sequence_overlap() const {
    return enable_sequence_parallelism && (sequence_parallelism_mode == "ring" || enable_sequence_overlap);
  }
  /// Ring attention is on (sequence parallelism in mode ring_attn).
  bool ring_attn() const { return enable_sequence_parallelism && sequence_parallelism_mode == "ring_attn"; }
  /// The tokens split over an sp axis of their own, whose ranks are data parallel too.
  bool sp_axis() const { return ulysses() || ring_attn(); }
  const dist::ProcessGroup& sp_group() const;
  /// A model's token split under sequence parallelism: over the tp group (split_gather) or
  /// the sp group (Ulysses and ring_attn, whose ranks are data parallel too); null without it.
  std::shared_ptr<nn::SequenceSplit> token_split() const;
};

/// Builds a replacement for the module at a suffix, from the native module there.
using ModuleFactory = std::function<std::shared_ptr<nn::Module>(const std::shared_ptr<nn::Module>& native,
                                                                const ShardConfig& config)>;

/// Replace the module at `suffix` (relative to the policy's module) by target(native).
struct SubModuleReplacementDescription {
  std::string suffix;
  ModuleFactory target_module;
  bool ignore_if_not_exist = false;
};

/// What a policy does to every module of one type.
struct ModulePolicyDescription {
  std::map<std::string, nn::Attribute> attribute_replacement;  // dotted path -> value
  std::vector<SubModuleReplacementDescription> sub_module_replacement;
};

class Policy {
 public:
  virtual ~Policy() = default;
  /// For messages, e.g. "ViTForImageClassificationPolicy".
  virtual std::string name() const = 0;
  /// Refuses a model or configuration the policy cannot shard (ValueError naming why).
  virtual void config_sanity_check(const nn::Module& model, const ShardConfig& config) const = 0;
  /// Runs before the replacements.
  virtual void preprocess(nn::Module&, const ShardConfig&) const {}
  /// Module type name (type_name()) -> what to do to every module of that type.
  virtual std::map<std::string, ModulePolicyDescription> module_policy(const nn::Module& model,
                                                                        const ShardConfig& config) const = 0;
  /// Runs after the replacements.
  virtual void postprocess(nn::Module&, const ShardConfig&) const {}
};

/// Applies `policy` to `model` in place (Colossal-AI's ShardFormer.optimize): sanity check,
/// preprocess, every module's attribute and sub-module replacements, postprocess. A
/// replacement that fails is reported with the module path.
void shard_model(nn::Module& model, const Policy& policy, const ShardConfig& config);

/// Applies `policy`'s rewrites (attributes and sub-module replacements) to the modules whose
/// path `select` takes, with their own config (a layerwise plan: each layer its own
/// tensor-parallel group); the sanity check runs, the model-wide pre/postprocess do not.
void shard_modules(nn::Module& model, const Policy& policy, const ShardConfig& config,
                   const std::function<bool(const std::string& path)>& select);

/// Policies by name, for a run config's `plugin.custom_policy` (code passes a Policy object).
void register_policy(const std::string& name, std::function<std::shared_ptr<Policy>()> make);
/// The policy registered as `name`; ValueError listing the registered names.
std::shared_ptr<Policy> make_policy(const std::string& name);
/// The built-in policy for a model's root type, or null (Colossal-AI's auto policy).
std::shared_ptr<Policy> auto_policy(const nn::Module& model);

}  // namespace booster::shardformer
