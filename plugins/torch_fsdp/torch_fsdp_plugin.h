// TorchFSDPPlugin (Colossal-AI's name; it takes PyTorch FSDP's arguments): fully sharded
// data parallelism built from the ZeRO engine (zero/). The auto-wrap policy cuts the model
// into units (PyTorch's FSDP instances); each unit's parameters are one flat parameter, a
// bucket of the engine: all-gathered when a module of the unit runs forward or backward and
// released once the unit is done (FetchHooks), its gradients reduce-scattered as one
// bucket. sharding_strategy FULL_SHARD shards the parameters, gradients and optimizer
// states (ZeRO-3); SHARD_GRAD_OP keeps the parameters whole between steps (ZeRO-2);
// NO_SHARD is DDP (the engine's stage-0 reducer). MixedPrecision's param_dtype and
// reduce_dtype choose the working and communication dtypes (fp32 masters kept), and
// cpu_offload puts the parameters' slices, the gradient shards, the masters and the
// optimizer states on the disk tier.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/plugin.h"
#include "core/common/config.h"
#include "zero/options.h"

namespace booster::plugins {

struct TorchFSDPOptions {
  std::string sharding_strategy = "FULL_SHARD";  // FULL_SHARD, SHARD_GRAD_OP or NO_SHARD
  bool cpu_offload = false;                      // CPUOffload(offload_params=True): the disk tier here
  std::string offload_dir;                       // the disk tier's folder ("": default_offload_dir(), the run's)
  std::string auto_wrap_policy;                  // "" (None: the root is the one unit), "transformer" or "size_based"
  std::string transformer_layer_cls;  // transformer: the unit classes (type names, comma-separated; "": the types of
                                      // a PipelineModule's layers: ViTLayer, GPT2Block, LlamaDecoderLayer, ...)
  int64_t min_num_params = 100000000;            // size_based: a subtree of at least this many becomes a unit
  std::string backward_prefetch = "BACKWARD_PRE";  // BACKWARD_PRE, BACKWARD_POST or "" (None)
  bool forward_prefetch = false;
  bool sync_module_states = false;  // accepted: every rank starts from rank 0's state anyway
  bool limit_all_gathers = true;    // accepted: at most the prefetched unit is gathered ahead
  bool use_orig_params = false;     // accepted: the original parameters are what the optimizer holds here
  // MixedPrecision(param_dtype, reduce_dtype, buffer_dtype), a [plugin.mixed_precision] table.
  std::string param_dtype = "fp32";  // fp32, bf16 or fp16 (working copies; fp32 masters kept)
  std::string reduce_dtype;          // "" (param_dtype), fp32, bf16 or fp16
  std::string buffer_dtype;          // "" (as they are) or fp32: buffers stay fp32 here
  GradScalerOptions scaler{65536.0, 1, 2, 0.5, 2000, 2, 4294967296.0};  // ShardedGradScaler's defaults (fp16)

  /// Reads a [plugin] table (name = "torch_fsdp"); unknown keys and wrong types refused.
  static TorchFSDPOptions from_config(const Config& cfg, const std::string& table = "plugin");
  /// Throws ValueError naming the first bad argument and what it accepts.
  void validate() const;
  /// The ZeRO engine's options these arguments make (FULL_SHARD and SHARD_GRAD_OP).
  zero::ZeroOptions zero_options() const;
};

/// The FSDP units of `root` under a policy: module paths ("" the root, always a unit), in
/// the order a forward reaches them. A transformer_layer_cls name that matches no module is
/// a ValueError naming it and the module types the model has (stricter than PyTorch, which
/// ignores an unused class: in a config file it is a typo more often than not).
std::vector<std::string> fsdp_units(const nn::Module& root, const TorchFSDPOptions& opts);
/// Parameters of each unit (those whose innermost unit it is).
std::vector<int64_t> fsdp_unit_params(const nn::Module& root, const std::vector<std::string>& units);
/// The line boost logs: the unit count, the largest and smallest units in parameters, and,
/// when size_based wraps nothing below the root, that every step gathers the whole model.
std::string describe_fsdp_units(const std::vector<std::string>& units, const std::vector<int64_t>& params,
                                const TorchFSDPOptions& opts);

class TorchFSDPPlugin : public Plugin {
 public:
  explicit TorchFSDPPlugin(TorchFSDPOptions opts = {});
  std::string name() const override { return "torch_fsdp"; }
  std::vector<std::string> supported_precisions() const override { return {"fp16", "bf16", "fp32"}; }
  bool control_precision() const override { return true; }
  std::string precision_option() const override { return "mixed_precision.param_dtype"; }
  bool control_checkpoint_io() const override { return true; }
  bool support_no_sync() const override { return true; }

  void configure(BoostedObjects& objects) override;
  std::shared_ptr<CheckpointIO> get_checkpoint_io() override;
  const TorchFSDPOptions& options() const { return opts_; }

 private:
  LayoutCheckpointIO checkpoint_io_;
  void configure_sharded(BoostedObjects& o);
  void configure_no_shard(BoostedObjects& o);
  TorchFSDPOptions opts_;
};

}  // namespace booster::plugins
