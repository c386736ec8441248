// TorchDDPModel (Colossal-AI's name): the model under data parallelism without sharding
// (TorchDDPPlugin, and HybridParallelPlugin's dp at zero_stage 0). Construction makes every
// rank of the group take its first rank's parameters and buffers; it broadcasts the buffers
// before each forward (broadcast_buffers) and owns the Reducer, its GradSync.
#pragma once

#include "booster/model_wrapper.h"
#include "core/dist/process_group.h"
#include "ddp/reducer.h"

namespace booster::ddp {

class TorchDDPModel : public ModelWrapper {
 public:
  TorchDDPModel(std::shared_ptr<ModelWrapper> inner, const dist::ProcessGroup& group, const ReducerOptions& reducer,
                bool broadcast_buffers = true);
  std::string type_name() const override { return "TorchDDPModel"; }
  void before_forward() override;
  GradSync* grad_sync() const override { return reducer_.get(); }
  Reducer& reducer() const { return *reducer_; }
  const std::shared_ptr<Reducer>& shared_reducer() const { return reducer_; }

 private:
  const dist::ProcessGroup& group_;
  bool broadcast_buffers_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace booster::ddp
