// What lm_train builds from its config: the schema of its keys (nanoGPT's names), the
// character-level data, the model (a GPT-2 or LLaMA preset, widths under the model's own
// config.json names), AdamW with nanoGPT's decay groups and its warm-up-cosine schedule,
// the loss, and text sampled from the trained model.
#pragma once

#include <memory>
#include <string>

#include "booster/booster.h"
#include "booster/plugin.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/common/config.h"
#include "data/bpe_tokenizer.h"
#include "data/token_stream.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "optim/lr_scheduler.h"

namespace booster::examples {

/// Keys of [model], [data], [train], [checkpoint], [run], [log] and [booster]; [plugin] is
/// checked by the plugin registry.
ConfigSchema lm_train_schema();

/// A language model and what lm_train and lm_sample need of it.
struct LmModel {
  std::shared_ptr<nn::Module> module;
  nn::CausalLM* lm = nullptr;   // the same object, for generation
  std::string family;           // "gpt2" or "llama"
  std::string config_json;      // its config.json
};
/// The model of [model] for a vocabulary of `vocab` and windows of `block` tokens: the
/// preset's family and shapes, a width key of the other family an error naming it.
LmModel make_lm_model(const Config& cfg, int64_t vocab, int64_t block);
/// The run's tokens: the text tokenized into data.cache_dir (once), or the token files of
/// data.train_bin / val_bin; returns the vocabulary (the text's, or model.vocab_size).
int64_t lm_text_cache(const Config& cfg, data::TextCache& cache);
/// The model lm_train builds from its config (lm_train_schema applied): make_lm_model at the
/// vocabulary of lm_text_cache and train.block_size.
LmModel lm_run_model(const Config& cfg);
/// The model a checkpoint's config.json describes (GPT-2 or LLaMA, by model_type).
LmModel lm_model_from_config_file(const std::string& path);
/// The model of the newest complete checkpoint under `checkpoints` (a step-N folder or its
/// parent), whole, loaded from any layout the run saved; `step_dir` receives its folder.
LmModel load_checkpoint_model(const std::string& checkpoints, std::string* step_dir = nullptr);
/// The model of a Hugging Face folder (gpt2_from_pretrained or llama_from_pretrained).
LmModel lm_model_from_pretrained(const std::string& dir);
/// A preset's model as the preset is (its vocabulary and positions), without dropout.
LmModel lm_model_from_preset(const std::string& preset);
/// GPT-2 from llm.c's gpt2_124M.bin layout (nn/llmc.h).
LmModel lm_model_from_llmc(const std::string& path);

/// Text to ids and back: the run's characters (vocab.json) or its byte-level BPE
/// (tokenizer.json); empty when the run trained on token files.
struct TextCodec {
  data::CharVocab chars;
  std::shared_ptr<data::ByteLevelBPE> bpe;
  bool empty() const { return !bpe && chars.chars.empty(); }
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};
/// The codec of a checkpoint or Hugging Face folder: its tokenizer.json, else its vocab.json
/// (neither: an error naming the folder).
TextCodec load_codec(const std::string& dir);

/// A run's objects before boost.
struct LmRun {
  LmModel model;
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler;
  std::shared_ptr<data::DataLoader> train_loader, val_loader;
  std::shared_ptr<data::DataLoader> final_val_loader;  // train.final_eval_iters batches (null when 0)
  TextCodec codec;           // the text's characters or BPE (empty for token files)
  SideFiles side_files;      // config.json and the vocabulary in every checkpoint
  int64_t evaluations = 0;   // max_iters / eval_interval: the Trainer's epochs
  int64_t parameters = 0;
};
/// The run at data-parallel size dp: an "epoch" is eval_interval optimizer steps of random
/// training windows (each rank its own, train.gradient_accumulation batches a step), the
/// test loader eval_iters random batches of the validation text. With a [lora] table,
/// `booster` enables LoRA on the model before the optimizer is made (over what trains).
/// train.lr_scaling = "dp" scales the lr by lr_replicas (0: dp).
LmRun make_lm_run(const Config& cfg, int dp, Plugin* plugin, Booster* booster = nullptr, int lr_replicas = 0);


/// Mean cross entropy over every token: logits [B, T, V], labels [B, T] (-100 skipped), by
/// the model's own loss (the vocabulary-parallel one where tensor parallelism split its head).
Criterion token_cross_entropy(const LmModel& model);

/// o.max_new_tokens tokens after `start`, as text (the continuation only); every rank draws
/// the same (collective under ZeRO-3: call it on every rank).
std::string generate_text(LmModel& model, const TextCodec& codec, const std::string& start, const nn::GenerateOptions& o);
/// generate_text with the [sample] keys: sample.max_new_tokens characters after sample.start ("" when the run trained on token
/// files, which carry no characters), drawn at sample.temperature from
/// the sample.top_k most likely (sample.seed); every rank draws the same (collective under
/// ZeRO-3: call it on every rank).
std::string sample_text(LmModel& model, const TextCodec& codec, const Config& cfg);

}  // namespace booster::examples
