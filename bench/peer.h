// Runs the PyTorch peer benchmark (../shared/bench/torch_vit_bench.py) as a subprocess
// and parses its one-line result, so ratios come from the same invocation.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/common/profiler.h"

namespace booster::bench {

/// What the peer printed.
struct PeerResult {
  double step_s = 0, img_s = 0, gflops = 0;
  std::string line;
};

/// True when /usr/bin/python3 can import torch.
bool peer_available();
/// Runs the peer for a model/batch/precision; nullopt (with a message on stderr) on failure.
std::optional<PeerResult> run_peer(const std::string& script, const std::string& model, int batch, int threads,
                                   bool bf16, int steps);
/// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s);
/// The median (the mean of the two middle values for an even count: with two rounds the
/// upper one reported a round whose ceiling had been measured low as 121 %); 0 for none.
double median(std::vector<double> v);
/// Ops of a profile that run a known number of FLOPs, rated against a ceiling.
struct FlopGroup {
  std::string name;              // "linears"
  std::vector<std::string> ops;  // profile entries counted: {"linear", "linear bwd"}
  double gflop = 0;              // what they compute in one step
};
/// Runs a shell command and returns what it printed (stdout and stderr), or nullopt when it
/// could not start or exited non-zero (its output on stderr).
std::optional<std::string> run_capture(const std::string& cmd);
/// Each op's median time over profiled steps and the median wall time of a step.
struct StepProfile {
  double wall = 0;
  std::vector<ProfileEntry> entries;
  /// Seconds of the ops named (forward and backward entries are separate names).
  double seconds_of(const std::vector<std::string>& ops) const;
};
/// Runs `step` `steps` times with the per-op profiler on: each op's median time over the
/// steps (0 in a step that did not run it), its calls in a step, the median wall time.
StepProfile profile_steps(const std::function<void()>& step, int steps);
/// Runs `step` `steps` times with the per-op profiler on and returns its report (forward ops
/// by name, backward as '<op> bwd'): each op's median time over the steps (0 in a step that did
/// not run it), its calls in a step, and the median wall time, so that one slow step on a
/// shared machine moves no figure. With groups and a ceiling (GFLOP/s) it adds each group's
/// rate against the ceiling, the time of everything else, and the share of the ceiling the
/// step would reach were everything else free.
std::string profile_step(const std::function<void()>& step, const std::vector<FlopGroup>& groups = {},
                         double ceiling_gflops = 0, int steps = 1);
/// ViT forward FLOPs per image with the peer's formula (fwd + bwd = 3x), in its parts: the
/// encoder's linears, its attention products (q k^T and P v), the patch embedding.
struct VitFlops {
  double linears = 0, attention = 0, patch_embedding = 0;
  double total() const { return linears + attention + patch_embedding; }
};
VitFlops vit_fwd_flop_parts(int64_t hidden, int64_t layers, int64_t image = 224, int64_t patch = 16);
double vit_fwd_flops(int64_t hidden, int64_t layers, int64_t image = 224, int64_t patch = 16);

}  // namespace booster::bench
