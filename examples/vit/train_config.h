// The run config of vit_train: every accepted key, its type and default, in one schema.
#pragma once

#include "core/common/config.h"

namespace booster::examples {

/// Keys of [model], [data], [train], [checkpoint], [log] and [booster]; [plugin] is
/// checked by the plugin registry.
ConfigSchema vit_train_schema();

/// Legacy Colossal-AI's parallel table ([parallel] pipeline, num_micro_batches;
/// [parallel.tensor] mode, size, depth) as HybridParallelPlugin's [plugin] keys (pp_size,
/// num_microbatches, tp_size, tp_mode, tp_depth; precision from booster.mixed_precision).
/// Call after apply(); ValueError when the config also has a [plugin] table.
void map_legacy_parallel(Config& cfg);
/// Legacy Colossal-AI's model globals (HIDDEN_SIZE, DEPTH, NUM_HEADS, MLP_RATIO) as the
/// [model] width keys; model.num_chunks only beside a [parallel] table (`legacy_parallel`:
/// the config had one before apply()). Call after apply().
void map_legacy_model(Config& cfg, bool legacy_parallel);

}  // namespace booster::examples
