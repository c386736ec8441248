// export_hf: writes a Hugging Face model folder (config.json, model.safetensors,
// preprocessor_config.json) from a vit_train checkpoint folder (step-N, or a run's
// checkpoints/ folder: its newest complete step, as vit_predict and --eval-only take it), so
// the model loads in transformers or back here with model.pretrained / vit_from_pretrained.
// Usage: export_hf <step folder | checkpoints folder> <output folder> [--max-shard-mb N]
#include <CLI/CLI.hpp>
#include <filesystem>

#include "booster/checkpoint/tensor_store.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/autograd/grad_mode.h"
#include "nn/pretrained.h"

using namespace booster;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Export a booster-cpp ViT checkpoint to Hugging Face layout"};
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
    nn::ViTConfig cfg = nn::ViTConfig::from_json_file((d / "config.json").string());
    nn::SkipInitGuard skip;
    nn::ViTForImageClassification model(cfg);
    const bool shard = fs::is_directory(d / "model");
    auto loaded = ckpt::load_tensors((d / (shard ? "model" : "model.ckpt")).string(), "model");
    {
      NoGradGuard ng;
      model.load_state_dict(loaded.tensors, /*strict=*/true);
    }
    nn::save_pretrained(model, out, size_t(max_shard_mb) << 20);
    if (fs::exists(d / "preprocessor_config.json"))
      fs::copy_file(d / "preprocessor_config.json", fs::path(out) / "preprocessor_config.json",
                    fs::copy_options::overwrite_existing);
    std::printf("exported %zu tensors to %s\n", loaded.tensors.size(), out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_hf: %s\n", e.what());
    return 1;
  }
}
