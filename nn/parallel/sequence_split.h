// Sequence parallelism's token split of a model (Colossal-AI's split_gather and all_to_all
// modes): the tokens are split over the sequence-parallel group on their way into the first
// layer and gathered on their way out of the last (a pipeline's first and last stage; the
// stages between hand shards on), so the layers in between run on token shards. Under
// split_gather the group is the tensor-parallel one (the layers' linears gather and
// reduce-scatter the tokens); under all_to_all (Ulysses) it is a group of its own whose
// ranks are data parallel too: each computes its shard's share of the gradients, which the
// gradient synchronization over dp x sp must sum, not average, inside the split (and
// average outside it, where every rank holds all of them). So with `data_parallel` the
// gradient entering the split is scaled by sp on the way back and the one leaving it by 1 / sp.
// Under ring_attn the group is the sp one too, and the split is zigzag: the sequence is cut
// into 2 x sp chunks and rank r holds chunks r and 2 sp - 1 - r (ring_attention.h), so the
// causal work is the same on every rank.
// A model that generates with a cache turns the split off (SequenceSplitOff): one token at a
// time does not split, and its layers then run whole.
#pragma once

#include <memory>

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::nn {

struct SequenceSplit {
  const dist::ProcessGroup* group = nullptr;
  bool data_parallel = false;  // the group is data parallel too (all_to_all, ring_attn; see above)
  bool zigzag = false;         // ring_attn's split (see above)
  bool on = true;        // off while the model generates with a cache
  /// [B, T, ...] -> this rank's balanced share of the T tokens. `who` names the model in the
  /// error when `divisible` and T does not divide by the group (a pipeline's last stage must
  /// be able to tell T from its shard).
  Tensor split_tokens(const Tensor& x, const char* who, bool divisible = true) const;
  /// This rank's share -> [B, T, ...] (full: T; -1: the shard's length x the group's size).
  Tensor gather_tokens(const Tensor& x, int64_t full = -1) const;
};

/// Turns `s` off while alive (generation), restoring it after; nothing when s is null.
class SequenceSplitOff {
 public:
  explicit SequenceSplitOff(std::shared_ptr<SequenceSplit> s) : s_(std::move(s)), was_(s_ && s_->on) {
    if (s_) s_->on = false;
  }
  ~SequenceSplitOff() {
    if (s_) s_->on = was_;
  }
  SequenceSplitOff(const SequenceSplitOff&) = delete;
  SequenceSplitOff& operator=(const SequenceSplitOff&) = delete;

 private:
  std::shared_ptr<SequenceSplit> s_;
  bool was_;
};

/// Identity forward; backward multiplies the gradient by `factor`.
Tensor scale_gradient(const Tensor& x, double factor);

/// True when `s` splits tokens right now.
inline bool splits_tokens(const std::shared_ptr<SequenceSplit>& s) { return s && s->group && s->on; }

}  // namespace booster::nn
