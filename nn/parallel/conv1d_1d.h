// GPT-2's Conv1D projections under 1D tensor parallelism (Colossal-AI's
// GPT2FusedLinearConv1D_Col and GPT2FusedLinearConv1D_Row). Conv1D stores its weight
// [in, out], so a column-parallel one splits dim 1 and a row-parallel one dim 0. A fused
// projection (c_attn: q, k and v side by side, n_fused = 3) splits each part alike: rank r
// holds the same columns of q, k and v, recorded as a framed box of the [in, 3E] logical
// weight ([0:in, 0:3, c0:c1] of [in, 3, E]), so checkpoints keep transformers' layout.
#pragma once

#include "core/dist/process_group.h"
#include "nn/gpt2.h"
#include "nn/parallel/linear_1d.h"

namespace booster::nn {

/// Column-parallel Conv1D: weight [in, out/tp] (each of n_fused parts split), bias [out/tp].
/// x [..., in] (replicated) -> [..., out/tp].
class GPT2FusedLinearConv1DCol : public Conv1D {
 public:
  /// opts.seq_parallel: the input is a sequence shard, all-gathered here (split_gather).
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& tp, int64_t n_fused = 1,
                                                         Linear1DOptions opts = {});
  GPT2FusedLinearConv1DCol(Tensor weight, Tensor bias, const dist::ProcessGroup& tp, int64_t n_fused, Linear1DOptions opts)
      : Conv1D(std::move(weight), std::move(bias)), tp_(tp), n_fused_(n_fused), opts_(std::move(opts)) {}
  std::string type_name() const override { return "GPT2FusedLinearConv1D_Col"; }
  Tensor forward(const Tensor& x) override;
  const Linear1DOptions& options() const { return opts_; }

 protected:
  std::shared_ptr<Module> fresh() const override;
  const dist::ProcessGroup& tp_;
  int64_t n_fused_;
  Linear1DOptions opts_;
};

/// Row-parallel Conv1D: weight [in/tp, out]; the bias [out] whole, added once after the
/// partial products are summed over tp. x [..., in/tp] -> [..., out] (replicated).
class GPT2FusedLinearConv1DRow : public Conv1D {
 public:
  /// opts.seq_parallel: the output is reduce-scattered into sequence shards (split_gather).
  static std::shared_ptr<UnaryModule> from_native_module(const std::shared_ptr<Module>& native,
                                                         const dist::ProcessGroup& tp, Linear1DOptions opts = {});
  GPT2FusedLinearConv1DRow(Tensor weight, Tensor bias, const dist::ProcessGroup& tp, Linear1DOptions opts)
      : Conv1D(std::move(weight), std::move(bias)), tp_(tp), opts_(std::move(opts)) {}
  std::string type_name() const override { return "GPT2FusedLinearConv1D_Row"; }
  Tensor forward(const Tensor& x) override;
  const Linear1DOptions& options() const { return opts_; }

 protected:
  std::shared_ptr<Module> fresh() const override;
  const dist::ProcessGroup& tp_;
  Linear1DOptions opts_;
};

}  // namespace booster::nn
