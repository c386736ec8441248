// MasterParams: the one owner of fp32 master weights under mixed precision. Built from the
// model's parameters, it makes each an fp32 master and turns the parameter (same handle)
// into a low-precision working copy. The precision owner's optimizer updates the masters,
// the model's checkpoint holds them, and the working copies are refreshed from them.
#pragma once

#include <string>
#include <vector>

#include "booster/optimizer_wrapper.h"
#include "optim/optimizer.h"

namespace booster {

class MasterParams {
 public:
  struct Entry {
    std::string name;
    Tensor param;   // the working copy (the model's parameter handle)
    Tensor master;  // fp32, contiguous, same shape and region
  };
  /// Masters of every floating parameter that trains; the parameters become `working`
  /// copies (frozen ones too, without a master: nothing updates them).
  MasterParams(const optim::NamedParams& params, DType working);

  const std::vector<Entry>& entries() const { return entries_; }
  /// The master of parameter `name`, or undefined.
  Tensor master(const std::string& name) const;
  DType working_dtype() const { return working_; }
  /// Copies every master into its working copy.
  void refresh_working();
  /// The model's state with masters in place of the low-precision parameters.
  ShardedState substitute(ShardedState state) const;

 private:
  std::vector<Entry> entries_;
  DType working_;
};

}  // namespace booster
