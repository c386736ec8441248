// The run config of vit_train: every accepted key, its type and default, in one schema.
#pragma once

#include "core/common/config.h"

namespace booster::examples {

/// Keys of [model], [data], [train], [checkpoint], [log] and [booster]; [plugin] is
/// checked by the plugin registry.
ConfigSchema vit_train_schema();

}  // namespace booster::examples
