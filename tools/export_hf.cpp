// export_hf: writes a Hugging Face model folder (config.json, model.safetensors, and
// preprocessor_config.json or vocab.json when the run saved one) from a vit_train or
// lm_train checkpoint folder (step-N, or a run's checkpoints/ folder: its newest complete
// step, as vit_predict and --eval-only take it), so the model loads in transformers or back
// here with vit_from_pretrained, gpt2_from_pretrained or llama_from_pretrained. The model
// is the one config.json's model_type names (vit, gpt2, llama).
// Usage: export_hf <step folder | checkpoints folder> <output folder> [--max-shard-mb N]
#include <CLI/CLI.hpp>
#include <filesystem>

#include "booster/checkpoint/tensor_store.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/autograd/grad_mode.h"
#include "core/common/file_util.h"
#include "nn/json_config.h"
#include "nn/lora.h"
#include "nn/pretrained.h"

using namespace booster;
namespace fs = std::filesystem;

namespace {

// The checkpoint's model (config.json's kind) loaded and written as transformers' folder.
template <typename M, typename C>
size_t export_model(const fs::path& d, const std::string& out, size_t max_shard_bytes) {
  const C cfg = C::from_json_file((d / "config.json").string());
  nn::SkipInitGuard skip;
  M model(cfg);
  const auto lora = nn::saved_lora_config(d.string());  // a LoRA run's: base and adapters, merged here
  if (lora) nn::inject_lora(model, *lora);
  auto loaded = ckpt::load_tensors(step_checkpoint_path(d.string()), "model");
  {
    NoGradGuard ng;
    model.load_state_dict(loaded.tensors, /*strict=*/true);
  }
  if (lora) nn::merge_and_unload(model);
  nn::save_pretrained(model, out, max_shard_bytes);
  return loaded.tensors.size();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Export a booster-cpp ViT, GPT-2 or LLaMA checkpoint to Hugging Face layout"};
  std::string step_dir, out;
  int64_t max_shard_mb = 0;
  app.add_option("checkpoint", step_dir, "a step folder holding config.json and model (or model.ckpt), or a run's "
                 "checkpoints folder (its newest complete step)")->required();
  app.add_option("output", out, "the Hugging Face folder to write")->required();
  app.add_option("--max-shard-mb", max_shard_mb, "shard model.safetensors past this size (0: one file)");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto newest = latest_checkpoint(step_dir);  // a run's step folder, or the newest of a folder of them
    BOOSTER_CHECK_T(IOError, newest || fs::exists(fs::path(step_dir) / "config.json"), "no complete checkpoint under '",
                    step_dir, "' (a step-N folder with progress.ckpt, a folder of them, or a folder with config.json)");
    if (newest) verify_run_checkpoint(*newest);
    const fs::path d(newest ? *newest : step_dir);
    const std::string path = (d / "config.json").string();
    std::string type = nn::config_model_type(read_text_file(path), path);
    if (type.empty()) type = "vit";  // the ViT configs of early releases wrote none
    const size_t bytes = size_t(max_shard_mb) << 20;
    size_t n = 0;
    if (type == "vit") n = export_model<nn::ViTForImageClassification, nn::ViTConfig>(d, out, bytes);
    else if (type == "gpt2") n = export_model<nn::GPT2LMHeadModel, nn::GPT2Config>(d, out, bytes);
    else if (type == "llama") n = export_model<nn::LlamaForCausalLM, nn::LlamaConfig>(d, out, bytes);
    else BOOSTER_THROW(ValueError, (d / "config.json").string(), ": model_type '", type, "' is not one export_hf writes (vit, gpt2, llama)");
    for (const char* side : {"preprocessor_config.json", "vocab.json", "tokenizer.json"})
      if (fs::exists(d / side)) fs::copy_file(d / side, fs::path(out) / side, fs::copy_options::overwrite_existing);
    std::printf("exported %zu tensors of a %s model to %s\n", n, type.c_str(), out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_hf: %s\n", e.what());
    return 1;
  }
}
