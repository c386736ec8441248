// Which implementation ops run: the fast path (oneDNN, vectorized loops) or the plain
// reference loops kept as a test oracle. Thread-local; tests flip it with ReferenceGuard.
#pragma once

namespace booster::kernels {

/// True while a ReferenceGuard is alive on this thread.
bool use_reference();

/// Routes every op on this thread through the reference loops for its lifetime.
class ReferenceGuard {
 public:
  ReferenceGuard();
  ~ReferenceGuard();
  ReferenceGuard(const ReferenceGuard&) = delete;
  ReferenceGuard& operator=(const ReferenceGuard&) = delete;

 private:
  bool prev_;
};

/// Which kernels the models' attention and normalization ops run: the fused ones (an
/// attention op that keeps no score graph, or FlashAttention's online softmax for causal
/// attention; one-pass layer and RMS norms), or the plain ops they amount to (score
/// product, softmax and context product; mean, variance and rsqrt as separate ops), as
/// HybridParallelPlugin's enable_flash_attention / enable_fused_normalization choose.
/// Process-wide (the kernels have no model to ask); Booster::boost sets it from the plugin
/// of the model it boosts. Ring attention's blocks are FlashAttention either way.
struct FusedKernels {
  bool attention = true;
  bool normalization = true;
};
void set_fused_kernels(const FusedKernels& f);
FusedKernels fused_kernels();

}  // namespace booster::kernels
