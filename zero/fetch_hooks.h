// ZeRO-3's fetch hooks (Colossal-AI's GeminiDDP hooks): module hooks that fetch a sharded
// bucket before a module using it runs forward or backward and release it once every
// parameter of it was used. The first forward and backward record the order in which
// buckets are used, and later passes prefetch the next max_prefetch buckets of that order;
// after the first step the parameters are packed again in the order the first forward used
// them (Colossal-AI packs in that order only with memory statistics made before the model
// is wrapped, else in registration order).
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "core/common/hook_handle.h"
#include "nn/module.h"
#include "zero/grad_reducer.h"

namespace booster::zero {

class FetchHooks {
 public:
  /// chunk_elems: the bucket size for parameters of these sizes in this (backward) order;
  /// empty: the buckets stay as they are (FSDP's units).
  FetchHooks(nn::Module& root, Layout& layout, Gatherer& gatherer, GradReducer& grads, int max_prefetch,
             std::function<int64_t(const std::vector<int64_t>&)> chunk_elems);
  /// After every optimizer step: the first one packs the buckets in the recorded order
  /// (with chunk_elems).
  void after_step();

 private:
  struct Trace {
    std::vector<size_t> order;          // buckets in the order a forward (backward) first used them
    std::map<size_t, size_t> position;  // bucket -> its index in order
    bool recorded = false;
  };
  void install();
  void install_module(nn::Module& m, const std::vector<size_t>& mine);
  void repack();
  /// Fetches bucket b and starts fetching the next max_prefetch buckets of the recorded order.
  void use(Trace& t, size_t b);

  nn::Module& root_;
  Layout& layout_;
  Gatherer& gatherer_;
  GradReducer& grads_;
  int max_prefetch_;
  std::function<int64_t(const std::vector<int64_t>&)> chunk_elems_;
  Trace fwd_, bwd_;
  std::vector<int> done_;   // per bucket: its parameters this forward has used
  std::vector<bool> used_;  // per part: the first forward used it
  std::vector<size_t> first_use_;
  bool recording_ = false, repacked_ = false;
  std::vector<HookHandle> hooks_;
};

}  // namespace booster::zero
