// Booster's LoRA calls (see booster.h): enable_lora and save_lora_as_pretrained.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "booster/booster.h"
#include "booster/checkpoint/state_io.h"
#include "booster/checkpoint/tensor_store.h"
#include "booster/dist_coordinator.h"
#include "core/common/file_util.h"
#include "core/dist/runtime.h"
#include "nn/safetensors.h"

namespace booster {

namespace fs = std::filesystem;

void Booster::enable_lora_on(nn::Module& model, const LoraOptions& o) {
  BOOSTER_CHECK(o.bnb_quantization_config.empty() && !o.quantize,
                "Booster.enable_lora: QLoRA (bnb_quantization_config, quantize) is not supported: there are no 4-bit "
                "kernels here; use LoRA over the fp32 or bf16 base");
  BOOSTER_CHECK(std::find(boosted_.begin(), boosted_.end(), &model) == boosted_.end(),
                "Booster.enable_lora: LoRA must be enabled before boosting the model");
  BOOSTER_CHECK(!plugin_ || plugin_->support_lora(), "Booster.enable_lora: plugin '", plugin_->name(),
                "' does not support LoRA");
  BOOSTER_CHECK(!lora_, "Booster.enable_lora: LoRA is already enabled on this booster's model");
  BOOSTER_CHECK(o.lora_config || !o.pretrained_dir.empty(),
                "Booster.enable_lora: give lora_config, or pretrained_dir to continue from saved adapters");
  nn::LoraConfig config;
  nn::StateDict saved;
  std::string file;
  if (!o.pretrained_dir.empty()) {  // PEFT's from_pretrained(is_trainable=True): the folder's config and tensors
    const fs::path dir(o.pretrained_dir);
    BOOSTER_CHECK_T(IOError, fs::is_directory(dir), "Booster.enable_lora: pretrained_dir '", o.pretrained_dir,
                    "' is not a folder");
    config = nn::LoraConfig::from_json_file((dir / "adapter_config.json").string());
    file = (dir / "adapter_model.safetensors").string();
    saved = nn::load_safetensors(file).tensors;
    if (o.lora_config) spdlog::warn("Booster.enable_lora: pretrained_dir's adapter_config.json is used, lora_config ignored");
  } else {
    config = *o.lora_config;
  }
  nn::LoraState state = nn::inject_lora(model, config);
  if (!saved.empty() || !file.empty()) nn::load_lora_tensors(model, state, saved, file);
  int64_t trainable = 0, all = 0;
  for (auto& [name, p] : model.named_parameters()) {
    all += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  spdlog::info("LoRA: {} layers adapted (r {}, lora_alpha {}); trainable params: {} || all params: {} || "
               "trainable%: {:.4f}",
               state.adapted.size(), state.config.r, state.config.lora_alpha, trainable, all,
               100.0 * double(trainable) / double(std::max<int64_t>(all, 1)));
  lora_ = std::move(state);
}

void Booster::save_lora_as_pretrained(ModelWrapper& model, const std::string& checkpoint) {
  BOOSTER_CHECK(lora_, "Booster.save_lora_as_pretrained: LoRA is not enabled (Booster.enable_lora before boost)");
  ShardedState adapters;
  for (StateTensor& st : model.checkpoint_state())
    if (lora_->is_adapter_tensor(st.name)) adapters.push_back(std::move(st));
  // The adapters through the checkpoint writer (any layout: shards, stages, replicas), read
  // back whole, written as PEFT's safetensors; the staging file is removed after.
  const fs::path dir(checkpoint), staging = dir / ".adapter_staging.ckpt";
  ckpt::on_every_rank([&] { fs::create_directories(dir); }, "save_lora_as_pretrained to '" + checkpoint + "'");
  ckpt::WriteOptions wo;
  ckpt::save_state(staging.string(), adapters, wo);
  const DistCoordinator coord;
  ckpt::on_every_rank(
      [&] {
        if (!coord.is_master()) return;
        auto loaded = ckpt::load_tensors(staging.string(), "model");
        nn::StateDict peft;
        for (auto& [name, t] : loaded.tensors) peft.emplace_back(nn::kPeftPrefix + name, t);
        nn::save_safetensors((dir / "adapter_model.safetensors").string(), peft);
        write_file_atomic((dir / "adapter_config.json").string(), lora_->config.to_json_string());
        fs::remove(staging);
      },
      "save_lora_as_pretrained to '" + checkpoint + "'");
}

}  // namespace booster
