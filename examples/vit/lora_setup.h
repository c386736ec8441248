// The run configs' [lora] table, for vit_train and lm_train: PEFT's LoraConfig keys
// (lora.r, lora.lora_alpha, lora.target_modules, lora.modules_to_save, ...), or
// lora.pretrained_dir to continue from saved adapters. lora.r = 0 (the default) and no
// pretrained_dir: no adapters, the whole model trains.
#pragma once

#include <filesystem>
#include <memory>

#include "booster/booster.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/common/config.h"

namespace booster::examples {

/// Adds the [lora] keys to a program's schema.
void add_lora_schema(ConfigSchema& s);
/// Whether the config asks for LoRA.
bool lora_enabled(const Config& cfg);
/// booster.enable_lora on the model, as the [lora] table says (nothing when it asks for none).
void enable_lora_from_config(Booster& booster, const std::shared_ptr<nn::Module>& model, const Config& cfg);
/// The run's checkpoint side files plus, under LoRA, adapter_config.json: a step folder
/// then says which adapters its tensors hold (evaluation, sampling and export_hf take
/// them and merge them in).
SideFiles with_lora_side_file(SideFiles inner, const Booster& booster);
/// After training: the adapters in PEFT's layout in <run_dir>/lora (when LoRA is on).
void save_lora_from_config(Booster& booster, ModelWrapper& model, const Config& cfg, const std::filesystem::path& run_dir);

}  // namespace booster::examples
