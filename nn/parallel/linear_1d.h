// Tensor-parallel linears (Megatron's, under Colossal-AI's names Linear1D_Col and
// Linear1D_Row). Built from a model's Linear by from_native_module, they adopt its
// parameter handles and reshard them in place, so the optimizer built before boost() and
// every checkpoint name stay valid: the handle now holds this rank's slice and records it
// as a region of the logical tensor. Communication is the differentiable collectives of
// core/dist/functional.h; with sequence parallelism the activations between the linears
// are sequence shards (all-gathered before a column-parallel linear, reduce-scattered after
// a row-parallel one).
#pragma once

#include "core/dist/process_group.h"
#include "nn/layers.h"
#include "nn/parallel/sequence_split.h"

namespace booster::nn {

struct Linear1DOptions {
  bool gather_output = false;    // column: all-gather the output features (the classifier)
  bool parallel_input = true;    // row: the input is already split along its features
  bool seq_parallel = false;     // activations outside the pair are sequence shards: a column
                                 // linear all-gathers its input, a row linear reduce-scatters its output
  bool ring = false;             // sequence parallel: the gather and the reduce-scatter go round the
                                 // group a shard at a time, overlapped with the products (mode ring)
  bool input_gathered = false;   // column, sequence parallel: the layer before already all-gathered
                                 // the input (and reduce-scatters its gradient), so nothing to do here
  int64_t seq_dim = 1;           // the sequence dim of [B, T, C] activations
  int64_t seq_len = -1;          // the full sequence length (balanced shards), -1: even shards
  /// A model's token split (sequence_split.h): while it is off (the model generating) the
  /// tokens are whole and seq_parallel acts as plain tensor parallelism. Null: always on.
  std::shared_ptr<const SequenceSplit> split;
  /// Whether the activations are sequence shards now.
  bool tokens_split() const { return seq_parallel && (!split || split->on); }
};

/// Replaces `param`'s storage by this rank's chunk along `dim` (same handle, requires_grad
/// kept) and records it as a box of the logical tensor. ShapeError when the dim does not
/// divide by the group size; ValueError when it is already a shard.
void shard_parameter(Tensor param, int64_t dim, const dist::ProcessGroup& g, const std::string& who);
/// The same for any box of the parameter (a framed one too: the same columns of each of a
/// fused tensor's parts); the parameter keeps its handle and holds the box's data.
void shard_parameter_region(Tensor param, const Region& box, const std::string& who);
/// The same for a box: block blocks[d].first of blocks[d].second along each dim d listed
/// (a 2D grid's weight: a block of its rows and a block of its columns).
void shard_parameter_blocks(Tensor param, const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>>& blocks,
                            const std::string& who);

/// The weight and bias handles of `native`, a Linear (ValueError naming `who` otherwise).
std::pair<Tensor, Tensor> linear_handles(const std::shared_ptr<Module>& native, const std::string& who);

/// A column-parallel product on a sequence shard as Megatron's sequence parallelism does it:
/// x [B, t, in] (this rank's tokens) all-gathered along `seq_dim` into [B, T, in], times the
/// weight (+ bias) -> [B, T, out]; only the shard is kept for backward, which all-gathers it
/// again for the weight's gradient and reduce-scatters the input's. `in_out`: the weight is
/// [in, out] (GPT-2's Conv1D), else [out, in] (Linear).
Tensor sequence_gathered_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroup& tp,
                                int64_t seq_dim, bool in_out);

/// What both tensor-parallel linears share: the adopted handles, the group and the options.
class Linear1D : public Linear {
 public:
  Linear1D(Tensor weight, Tensor bias, const dist::ProcessGroup& tp, Linear1DOptions opts)
      : Linear(std::move(weight), std::move(bias)), tp_(tp), opts_(opts) {}
  const Linear1DOptions& options() const { return opts_; }

 protected:
  /// A T with empty tensors of this layer's shapes (clone() fills them).
  template <typename T>
  std::shared_ptr<Module> fresh_as() const {
    if (!weight.defined()) {  // released (a pipeline stage that does not hold this layer)
      auto m = std::make_shared<T>(Tensor::empty({1, 1}), Tensor::empty({1}), tp_, opts_);
      m->replace_tensor("weight", Tensor());
      m->replace_tensor("bias", Tensor());
      return m;
    }
    Tensor w = Tensor::empty(weight->shape(), weight->dtype());
    Tensor b = bias.defined() ? Tensor::empty(bias->shape(), bias->dtype()) : Tensor();
    return std::make_shared<T>(w, b, tp_, opts_);
  }
  const dist::ProcessGroup& tp_;
  Linear1DOptions opts_;
};

/// Column-parallel linear: weight [out/tp, in] and bias [out/tp] are this rank's rows of
/// the logical [out, in] and [out]. x: [..., in] (replicated; or a sequence shard under
/// sequence parallelism) -> [..., out/tp] (or [..., out] with gather_output).
class Linear1DCol : public Linear1D {
 public:
  /// Shards `native`'s parameters over `tp` (a Linear1DCol already is one: returned as is).
  static std::shared_ptr<Linear> from_native_module(const std::shared_ptr<Module>& native, const dist::ProcessGroup& tp,
                                                    Linear1DOptions opts = {});
  using Linear1D::Linear1D;
  std::string type_name() const override { return "Linear1DCol"; }
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override { return fresh_as<Linear1DCol>(); }
};

/// Row-parallel linear: weight [out, in/tp] is this rank's columns of the logical
/// [out, in]; the bias [out] is whole and added once, after the partial products are
/// summed over tp. x: [..., in/tp] (or [..., in] without parallel_input) -> [..., out]
/// (a sequence shard of it under sequence parallelism).
class Linear1DRow : public Linear1D {
 public:
  static std::shared_ptr<Linear> from_native_module(const std::shared_ptr<Module>& native, const dist::ProcessGroup& tp,
                                                    Linear1DOptions opts = {});
  using Linear1D::Linear1D;
  std::string type_name() const override { return "Linear1DRow"; }
  Tensor forward(const Tensor& x) override;

 protected:
  std::shared_ptr<Module> fresh() const override { return fresh_as<Linear1DRow>(); }
};

}  // namespace booster::nn
