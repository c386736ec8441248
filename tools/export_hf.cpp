// export_hf: writes a Hugging Face model folder (config.json, model.safetensors,
// preprocessor_config.json) from a vit_train checkpoint folder (step-N), so the model
// loads in transformers or back here with model.pretrained / vit_from_pretrained.
// Usage: export_hf <step folder> <output folder> [--max-shard-mb N]
#include <CLI/CLI.hpp>
#include <filesystem>

#include "booster/checkpoint/tensor_store.h"
#include "core/autograd/grad_mode.h"
#include "nn/pretrained.h"

using namespace booster;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Export a booster-cpp ViT checkpoint to Hugging Face layout"};
  std::string step_dir, out;
  int64_t max_shard_mb = 0;
  app.add_option("checkpoint", step_dir, "a checkpoint folder holding config.json and model (or model.ckpt)")->required();
  app.add_option("output", out, "the Hugging Face folder to write")->required();
  app.add_option("--max-shard-mb", max_shard_mb, "shard model.safetensors past this size (0: one file)");
  CLI11_PARSE(app, argc, argv);
  try {
    const fs::path d(step_dir);
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
