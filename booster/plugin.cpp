// Plugin defaults for optional capabilities.
#include "booster/plugin.h"

namespace booster {

NoSyncScope Plugin::no_sync(BoostedModel&, OptimizerWrapper*) {
  BOOSTER_THROW(ValueError, "plugin '", name(), "' does not support no_sync (support_no_sync() is false)");
}

PipelineResult Plugin::execute_pipeline(const std::function<std::optional<data::Batch>()>&, BoostedModel&,
                                        const Criterion&, OptimizerWrapper*, bool, bool) {
  BOOSTER_THROW(ValueError, "plugin '", name(),
                "' has no pipeline parallelism (support_pipeline() is false); call the model, booster.backward and "
                "optimizer.step instead of execute_pipeline");
}

}  // namespace booster
