// lm_sample: text from an lm_train checkpoint (nanoGPT's sample.py), or from a Hugging Face
// folder export_hf wrote of one. The config.json says the model (GPT-2 or LLaMA) and
// tokenizer.json (BPE) or vocab.json (characters) the text; a checkpoint's weights load from any layout the run saved (one
// file or shards). Generation uses the key/value cache; the context is cropped to the
// model's positions as nanoGPT's is.
// Usage: lm_sample --checkpoint runs/shakespeare_char/checkpoints | --model HF_DIR  --start "ROMEO:" --max_new_tokens 500
#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "booster/booster.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/common/file_util.h"
#include "lm_setup.h"

using namespace booster;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Sample text from a trained character-level language model (lm_train's checkpoints)"};
  std::string checkpoint, model_dir, start = "\n";
  nn::GenerateOptions o;
  o.max_new_tokens = 500, o.temperature = 0.8, o.top_k = 200;
  int num_samples = 1;
  auto* c = app.add_option("--checkpoint", checkpoint, "an lm_train checkpoint folder (step-N or its parent)");
  app.add_option("--model", model_dir, "a Hugging Face folder with tokenizer.json or vocab.json (export_hf of a checkpoint)")->excludes(c);
  app.add_option("--start", start, "the text the samples continue");
  app.add_option("--max_new_tokens", o.max_new_tokens, "characters a sample adds");
  app.add_option("--temperature", o.temperature, "1: the model's distribution; lower: surer; 0: the likeliest");
  app.add_option("--top_k", o.top_k, "draw among the k likeliest characters (0: all)");
  app.add_option("--seed", o.seed, "the draws' seed");
  app.add_option("--num_samples", num_samples, "samples to print");
  CLI11_PARSE(app, argc, argv);
  try {
    examples::LmModel model;
    fs::path dir;
    if (!checkpoint.empty()) {
      std::string step;
      model = examples::load_checkpoint_model(checkpoint, &step);
      dir = step;
    } else {
      BOOSTER_CHECK(!model_dir.empty(), "give --checkpoint or --model");
      dir = model_dir;
      model = examples::lm_model_from_pretrained(model_dir);
    }
    const examples::TextCodec codec = examples::load_codec(dir.string());
    for (int s = 0; s < num_samples; ++s, ++o.seed)
      std::printf("%s%s\n---------------\n", start.c_str(), examples::generate_text(model, codec, start, o).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lm_sample: %s\n", e.what());
    return 1;
  }
}
