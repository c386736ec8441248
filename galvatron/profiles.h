// What Galvatron's search is costed from, in Galvatron's file formats. The hardware profile
// (galvatron_profile_hardware): all-reduce bus bandwidth per group size and consecutiveness
// (allreduce_bandwidth_{N}nodes_{G}gpus_per_node.json), point-to-point bandwidth per
// pipeline size (p2p_bandwidth_...json) and the slowdown of compute beside communication
// (overlap_coefficient.json). The model profile (galvatron_profile_model): a layer's
// forward time per sample for each tensor-parallel degree (and Ulysses degree) and the
// embeddings' and head's (computation_profiling_{prec}_{model}.json), a layer's parameters
// and its activations per sample for each degree and checkpointed, the rest's, and the runtime's own memory
// (memory_profiling_{prec}_{model}.json).
#pragma once

#include <map>
#include <string>

namespace booster::galvatron {

struct HardwareProfile {
  std::map<std::string, double> allreduce_busbw;  // "allreduce_size_{n}_consec_{0|1}" -> GB/s
  std::map<int, double> p2p_bw;                   // pipeline size -> GB/s
  double overlap_coe = 1.0;

  /// File names under a folder for a machine of `nodes` x `per_node` ranks.
  static std::string allreduce_file(int nodes, int per_node);
  static std::string p2p_file(int nodes, int per_node);
  static HardwareProfile read(const std::string& dir, int nodes, int per_node);
  void write(const std::string& dir, int nodes, int per_node) const;
  /// Milliseconds to all-reduce `mb` megabytes over n ranks (consecutive or strided); 0 for n = 1.
  double allreduce_ms(double mb, int n, bool consec) const;
  /// Milliseconds to send `mb` megabytes between ranks of a pipeline of pp stages (or the
  /// ranks of a stage, pp = 1, using the nearest profiled size).
  double p2p_ms(double mb, int pp) const;
};

struct ModelProfile {
  std::string model, precision;
  int64_t seq = 0, hidden = 0, profiled_batch = 0;
  std::map<int, double> fwd_ms_per_sample;  // tp -> one layer's forward, ms a sample (its tp traffic included)
  std::map<int, double> fwd_bwd_ms_per_sample;  // tp -> its forward and backward (no gradient sync)
  // Ulysses of degree n (n > 1): the same per n, its all-to-alls and token split and gather
  // included, and its activations a sample (empty: not profiled, Ulysses not searched).
  std::map<int, double> sp_fwd_ms_per_sample, sp_fwd_bwd_ms_per_sample, sp_act_mb_per_sample;
  double other_fwd_ms_per_sample = 0;       // the embeddings and the head
  double other_fwd_bwd_ms_per_sample = 0;
  double optimizer_ms_per_param = 0;        // an optimizer step (master update and working copy)
  double optimizer_mb_per_param = 0;        // what the step allocates on top, at most
  double zero3_ms_per_layer = 0;            // a ZeRO-3 layer's gathers in a step, over zero3_group ranks
  int zero3_group = 0;                      // (0: not profiled; the hardware profile's bandwidth then)
  int max_tp = 0;                           // the largest degree a layer splits into (its heads); 0: no limit
  bool sequence_parallel = false;           // the tp figures are under Megatron-SP (plans run with sequence_parallel)
  double param_count = 0;                   // one layer's parameters
  double other_param_count = 0;             // the embeddings' and head's
  std::map<int, double> act_mb_per_sample;  // tp -> one layer's activations kept for backward, MB a sample
  double checkpoint_act_mb_per_sample = 0;  // a checkpointed layer's (its input)
  double checkpoint_backward_mb_per_sample = 0;  // what a checkpointed layer's recompute and backward hold at most
  double other_act_mb_per_sample = 0;
  // The embeddings' shares of the embeddings' and head's parameters, activations and forward
  // time: a pipeline's first stage holds the embeddings, its last the head (half each where
  // not profiled).
  double embed_param_share = 0.5, embed_act_share = 0.5, embed_time_share = 0.5;
  double runtime_mb = 0;                    // what a boosted rank holds beyond the model (buffers, workspace)

  static std::string computation_file(const std::string& precision, const std::string& model);
  static std::string memory_file(const std::string& precision, const std::string& model);
  static ModelProfile read(const std::string& dir, const std::string& precision, const std::string& model);
  void write(const std::string& dir) const;
  /// The forward time of a tensor-parallel degree (the nearest profiled degree scaled by the
  /// ratio of degrees where it was not profiled: a larger world than the profiler's; a degree
  /// above max_tp is refused).
  double fwd_ms(int tp) const;
  /// Forward and backward (3 x the forward where not profiled).
  double fwd_bwd_ms(int tp) const;
  double act_mb(int tp) const;
  /// Whether Ulysses was profiled; its figures at a degree (as the tp ones, by the nearest).
  bool has_sp() const { return !sp_fwd_ms_per_sample.empty(); }
  double sp_fwd_ms(int n) const;
  double sp_fwd_bwd_ms(int n) const;
  double sp_act_mb(int n) const;
  /// A checkpointed layer's backward working set at a degree (the profiled one at tp 1, by
  /// the ratio of the activations elsewhere; its activations where not profiled).
  double checkpoint_backward_mb(int tp) const;

 private:
  double at_degree(const std::map<int, double>& m, int tp, const char* what) const;
};

}  // namespace booster::galvatron
