// WeightGradStore (see weight_grad_store.h).
#include "core/autograd/weight_grad_store.h"

#include "core/autograd/engine.h"
#include "core/common/profiler.h"

namespace booster::autograd {

namespace {
thread_local WeightGradStore* t_store = nullptr;
}  // namespace

WeightGradStore* collecting_weight_grads() { return t_store; }

StoreWeightGrads::StoreWeightGrads(WeightGradStore* store) : prev_(t_store) { t_store = store; }
StoreWeightGrads::~StoreWeightGrads() { t_store = prev_; }

bool defer_weight_grad(const Tensor& w) {
  return t_store != nullptr && w.defined() && w.requires_grad() && w.impl()->grad_fn == nullptr;
}

void WeightGradStore::run() {
  ProfileScope prof_("weight gradients");
  std::vector<Job> jobs = std::move(jobs_);
  jobs_.clear();
  std::vector<std::pair<Tensor, Tensor>> grads;
  {
    StoreWeightGrads none(nullptr);  // a product runs now, even inside another store's scope
    NoGradGuard ng;
    for (Job& job : jobs) {
      for (auto& wg : job()) grads.push_back(std::move(wg));
      job = nullptr;  // what the product saved goes as soon as it ran
    }
  }
  accumulate_into_leaves(std::move(grads));
}

}  // namespace booster::autograd
