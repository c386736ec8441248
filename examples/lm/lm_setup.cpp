// lm_train's objects from its config (see lm_setup.h). Defaults are nanoGPT's
// shakespeare_char CPU recipe (its README): 4 layers, 4 heads, 128 wide, block 64, batch 12
// (here per rank: 6 on each of 2), 2,000 iterations, lr 1e-3 cosine to 1e-4 after 100
// warm-up iterations, AdamW betas (0.9, 0.99), weight decay 0.1, clipping at 1, no dropout.
#include "lm_setup.h"

#include "lora_setup.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "booster/booster.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/autograd/grad_mode.h"
#include "core/common/file_util.h"
#include "core/kernels/ops.h"
#include "data/sampler.h"
#include "nn/json_config.h"
#include "nn/lazy.h"
#include "nn/llmc.h"
#include "nn/pretrained.h"
#include "optim/adam.h"

namespace booster::examples {

namespace fs = std::filesystem;

ConfigSchema lm_train_schema() {
  using T = ConfigType;
  ConfigSchema s;
  s.add("model.preset", T::string, "shakespeare-char",
        "a GPT-2 preset (gpt2, gpt2-tiny, shakespeare-char, ...) or a LLaMA one (llama-tiny, shakespeare-char-llama, ...)")
      .add("model.n_layer", T::integer, 0, "GPT-2: 0 the preset's")
      .add("model.n_head", T::integer, 0, "GPT-2: 0 the preset's")
      .add("model.n_embd", T::integer, 0, "GPT-2: 0 the preset's")
      .add("model.hidden_size", T::integer, 0, "LLaMA: 0 the preset's")
      .add("model.intermediate_size", T::integer, 0, "LLaMA: 0 the preset's")
      .add("model.num_hidden_layers", T::integer, 0, "LLaMA: 0 the preset's")
      .add("model.num_attention_heads", T::integer, 0, "LLaMA: 0 the preset's")
      .add("model.num_key_value_heads", T::integer, 0, "LLaMA: 0 the preset's")
      .add("model.rope_theta", T::floating, 0.0, "LLaMA: 0 the preset's")
      .add("model.dropout", T::floating, 0.0, "nanoGPT's dropout (GPT-2: resid, embd and attn; LLaMA: attention_dropout)")
      .add("model.activation_function", T::string, "", "GPT-2: gelu_new (tanh), gelu (exact, nanoGPT's nn.GELU) or \"\": the preset's")
      .add("model.bias", T::boolean, false, "biases in the linears and norms (nanoGPT's bias; LLaMA: attention_bias, mlp_bias)")
      .add("model.pretrained", T::string, "",
           "a Hugging Face folder (GPT-2 or LLaMA) to start from: its config.json rules, the width keys are refused")
      .add("model.lazy_init", T::boolean, false, "record the parameters and materialize at boost, only what a rank keeps")
      .add("model.gradient_checkpointing", T::boolean, false, "recompute each block's forward in backward")
      .add("model.fused_linear_cross_entropy", T::boolean, true,
           "Liger's: while training, the head and its loss a block of tokens at a time, no whole logits")
      .add("model.gradient_checkpointing_ratio", T::floating, 1.0, "share of each stage's blocks checkpointed")
      .add("data.text", T::string, BOOSTER_SHARED_DIR "/data/tinyshakespeare/input.txt", "the text, tokenized by characters")
      .add("data.cache_dir", T::string, "runs/cache/shakespeare_char", "where train.bin, val.bin and meta.json go")
      .add("data.val_fraction", T::floating, 0.1, "the last share of the text that validates")
      .add("data.tokenizer", T::string, "char", "char (nanoGPT's shakespeare_char) or bpe (GPT-2's byte-level BPE)")
      .add("data.bpe_vocab_size", T::integer, 512, "bpe: tokens to train on the training split (with no tokenizer_json)")
      .add("data.tokenizer_json", T::string, "", "bpe: a Hugging Face tokenizer.json to use (GPT-2's) instead of training")
      .add("data.train_bin", T::string, "", "a token file to train on instead of the text (nanoGPT's train.bin, llm.c's .bin)")
      .add("data.val_bin", T::string, "", "its validation tokens (with data.train_bin)")
      .add("data.dtype", T::string, "uint16", "a headerless token file's width: uint16 or uint32 (llm.c's header says its own)")
      .add("data.ids_dtype", T::string, "int64", "input_ids and labels: int64 (PyTorch's) or int32 (half the bytes)")
      .add("model.vocab_size", T::integer, 0, "with token files: the vocabulary (0: the text's characters)")
      .add("train.batch_size", T::integer, 6, "windows per data-parallel rank and iteration")
      .add("train.gradient_accumulation", T::integer, 1,
           "batches an optimizer step accumulates on each replica (nanoGPT's gradient_accumulation_steps is this x dp)")
      .add("train.block_size", T::integer, 64, "tokens a window (the model's n_positions)")
      .add("train.max_iters", T::integer, 2000)
      .add("train.eval_interval", T::integer, 250, "iterations between evaluations (divides max_iters)")
      .add("train.eval_iters", T::integer, 20, "global batches an evaluation scores")
      .add("train.final_eval_iters", T::integer, 0, "batches the final model is scored on after training (0: none)")
      .add("train.lr", T::floating, 1e-3)
      .add("train.lr_scaling", T::string, "none", "none (lr as given, nanoGPT's) or dp (lr times the data-parallel size)")
      .add("train.min_lr", T::floating, 1e-4)
      .add("train.warmup_iters", T::integer, 100)
      .add("train.lr_decay_iters", T::integer, 2000)
      .add("train.weight_decay", T::floating, 0.1)
      .add("train.beta1", T::floating, 0.9)
      .add("train.beta2", T::floating, 0.99)
      .add("train.grad_clip", T::floating, 1.0, "0: no clipping")
      .add("train.seed", T::integer, 1337)
      .add("train.log_interval", T::integer, 50)
      .add("checkpoint.every_iters", T::integer, 0, "0: a checkpoint at the end only")
      .add("checkpoint.keep_last", T::integer, 2)
      .add("checkpoint.use_async", T::boolean, false, "written behind training (Booster's use_async)")
      .add("run.output_dir", T::string, "runs")
      .add("run.name", T::string, "shakespeare_char")
      .add("log.level", T::string, "info")
      .add("booster.mixed_precision", T::string, "fp32", "fp32, bf16, fp16 or auto (bf16 where this CPU runs it faster)")
      .add("sample.start", T::string, "\n")
      .add("sample.max_new_tokens", T::integer, 300)
      .add("sample.temperature", T::floating, 0.8)
      .add("sample.top_k", T::integer, 200)
      .add("sample.seed", T::integer, 1337)
      .open_table("plugin");
  s.range("model.gradient_checkpointing_ratio", 0.0, 1.0);
  for (const char* k : {"train.batch_size", "train.gradient_accumulation", "train.block_size", "train.max_iters",
                        "train.eval_interval", "train.eval_iters",
                        "train.lr_decay_iters", "sample.top_k"})
    s.range(k, 1);
  for (const char* k : {"train.warmup_iters", "train.final_eval_iters", "train.log_interval", "checkpoint.every_iters", "sample.max_new_tokens"})
    s.range(k, 0);
  add_lora_schema(s);
  return s;
}

namespace {

bool is_llama(const std::string& preset) {
  const auto names = nn::LlamaConfig::preset_names();
  return std::find(names.begin(), names.end(), preset) != names.end();
}

// Each family's width keys in [model] (0: the preset's).
const std::vector<const char*> kGpt2Widths = {"model.n_layer", "model.n_head", "model.n_embd"};
const std::vector<const char*> kLlamaWidths = {"model.hidden_size", "model.intermediate_size", "model.num_hidden_layers",
                                               "model.num_attention_heads", "model.num_key_value_heads", "model.rope_theta"};

// Keys that must be left at 0 here: an error naming the first one set, and why.
void refuse_keys(const Config& cfg, const std::vector<const char*>& keys, const std::string& why) {
  for (const char* k : keys) BOOSTER_CHECK(cfg.get_float(k) == 0, k, why);
}

template <typename T>
void override_if(const Config& cfg, const char* key, T& field) {
  if (cfg.get_float(key) > 0) field = T(cfg.get_float(key));
}

template <typename M>
LmModel wrap(std::shared_ptr<M> m, const char* family) {
  return {m, m.get(), family, m->config().to_json_string()};
}

// The model `make` builds, under LazyInit where model.lazy_init asks (materialized by boost,
// each rank only what it keeps; a folder's tensors become the sources), its layers
// checkpointed where model.gradient_checkpointing asks.
LmModel with_model_options(const Config& cfg, const std::function<LmModel()>& make) {
  LmModel out;
  if (cfg.get_bool("model.lazy_init")) {
    nn::LazyInit lazy;
    out = make();
  } else {
    out = make();
  }
  if (cfg.get_bool("model.gradient_checkpointing"))
    out.lm->gradient_checkpointing_enable(cfg.get_float("model.gradient_checkpointing_ratio"));
  out.lm->fused_linear_cross_entropy = cfg.get_bool("model.fused_linear_cross_entropy");
  return out;
}

// A Hugging Face folder as the run's model: its config.json decides the shapes and dropouts
// (as from_pretrained does); the keys that would change them are refused, and the text's
// vocabulary and the windows must fit it.
LmModel pretrained_lm_model(const Config& cfg, int64_t vocab, int64_t block) {
  const std::string dir = cfg.get_string("model.pretrained");
  const std::string why = " cannot change the pretrained model of " + dir + " (its config.json decides)";
  refuse_keys(cfg, kGpt2Widths, why);
  refuse_keys(cfg, kLlamaWidths, why);
  refuse_keys(cfg, {"model.dropout"}, why);
  BOOSTER_CHECK(!cfg.get_bool("model.bias"), "model.bias", why);
  LmModel m = with_model_options(cfg, [&] { return lm_model_from_pretrained(dir); });
  if (const std::string act = cfg.get_string("model.activation_function"); !act.empty()) {  // only the folder's own
    auto* gpt2 = dynamic_cast<nn::GPT2LMHeadModel*>(m.module.get());
    BOOSTER_CHECK(gpt2 && gpt2->config().activation_function == act, "model.activation_function '", act, "'", why,
                  ": it has '", gpt2 ? gpt2->config().activation_function : std::string("silu"), "'");
  }
  BOOSTER_CHECK(m.lm->vocab_size() == vocab, dir, " knows ", m.lm->vocab_size(), " tokens, the text's tokenizer ", vocab,
                " (give its tokenizer: data.tokenizer = \"bpe\", data.tokenizer_json = <its tokenizer.json>)");
  BOOSTER_CHECK(block <= m.lm->max_positions(), "train.block_size ", block, " is past the ", m.lm->max_positions(),
                " positions of ", dir);
  return m;
}

// config.json's model_type, which must be a family lm_train makes.
std::string lm_family(const std::string& text, const std::string& path) {
  const std::string type = nn::config_model_type(text, path);
  BOOSTER_CHECK(type == "gpt2" || type == "llama", path, ": model_type '", type,
                "' is not a language model lm_train makes (gpt2, llama)");
  return type;
}

}  // namespace

LmModel make_lm_model(const Config& cfg, int64_t vocab, int64_t block) {
  if (!cfg.get_string("model.pretrained").empty()) return pretrained_lm_model(cfg, vocab, block);
  const std::string preset = cfg.get_string("model.preset");
  const double drop = cfg.get_float("model.dropout");
  if (is_llama(preset)) {
    refuse_keys(cfg, kGpt2Widths, " is not a key of " + preset + "'s family (LLaMA: hidden_size, intermediate_size, "
                                  "num_hidden_layers, num_attention_heads, num_key_value_heads, rope_theta)");
    BOOSTER_CHECK(cfg.get_string("model.activation_function").empty(), "model.activation_function is GPT-2's; ", preset,
                  " uses SiLU");
    nn::LlamaConfig c = nn::LlamaConfig::preset(preset);
    override_if(cfg, "model.hidden_size", c.hidden_size);
    override_if(cfg, "model.intermediate_size", c.intermediate_size);
    override_if(cfg, "model.num_hidden_layers", c.num_hidden_layers);
    override_if(cfg, "model.num_attention_heads", c.num_attention_heads);
    override_if(cfg, "model.num_key_value_heads", c.num_key_value_heads);
    override_if(cfg, "model.rope_theta", c.rope_theta);
    c.attention_dropout = drop;
    c.attention_bias = c.mlp_bias = cfg.get_bool("model.bias");
    c.vocab_size = vocab, c.max_position_embeddings = block;
    c.validate();
    return with_model_options(cfg, [&] { return wrap(std::make_shared<nn::LlamaForCausalLM>(c), "llama"); });
  }
  refuse_keys(cfg, kLlamaWidths, " is not a key of " + preset + "'s family (GPT-2: n_layer, n_head, n_embd)");
  nn::GPT2Config c = nn::GPT2Config::preset(preset);
  override_if(cfg, "model.n_layer", c.n_layer);
  override_if(cfg, "model.n_head", c.n_head);
  override_if(cfg, "model.n_embd", c.n_embd);
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = drop;
  c.bias = cfg.get_bool("model.bias");
  if (const std::string act = cfg.get_string("model.activation_function"); !act.empty()) c.activation_function = act;
  c.vocab_size = vocab, c.n_positions = block;
  c.validate();
  return with_model_options(cfg, [&] { return wrap(std::make_shared<nn::GPT2LMHeadModel>(c), "gpt2"); });
}

LmModel lm_model_from_config_file(const std::string& path) {
  const std::string text = read_text_file(path);
  if (lm_family(text, path) == "llama")
    return wrap(std::make_shared<nn::LlamaForCausalLM>(nn::LlamaConfig::from_json_string(text, path)), "llama");
  return wrap(std::make_shared<nn::GPT2LMHeadModel>(nn::GPT2Config::from_json_string(text, path)), "gpt2");
}

LmModel lm_model_from_preset(const std::string& preset) {
  if (is_llama(preset)) {
    nn::LlamaConfig c = nn::LlamaConfig::preset(preset);
    c.attention_dropout = 0;
    return wrap(std::make_shared<nn::LlamaForCausalLM>(c), "llama");
  }
  nn::GPT2Config c = nn::GPT2Config::preset(preset);  // throws listing its names
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0;
  return wrap(std::make_shared<nn::GPT2LMHeadModel>(c), "gpt2");
}

LmModel lm_model_from_llmc(const std::string& path) { return wrap(nn::gpt2_from_llmc(path), "gpt2"); }

LmModel lm_model_from_pretrained(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (lm_family(read_text_file(path), path) == "llama") return wrap(nn::llama_from_pretrained(dir), "llama");
  return wrap(nn::gpt2_from_pretrained(dir), "gpt2");
}

namespace {

std::shared_ptr<data::TokenStream> windows(const std::string& bin, const Config& cfg, size_t count) {
  data::TokenStreamOptions o;
  o.block_size = cfg.get_int("train.block_size");
  o.dtype = cfg.get_string("data.dtype");
  const std::string ids = cfg.get_string("data.ids_dtype");
  BOOSTER_CHECK(ids == "int64" || ids == "int32", "data.ids_dtype must be int64 or int32, got '", ids, "'");
  o.ids_dtype = ids == "int32" ? DType::i32 : DType::i64;
  o.random_windows = true;  // nanoGPT's get_batch, for training and for estimate_loss
  o.limit = count;
  return std::make_shared<data::TokenStream>(bin, o);
}

}  // namespace

int64_t lm_text_cache(const Config& cfg, data::TextCache& cache) {
  // The text tokenized by characters, or token files as they are (then the vocabulary is
  // model.vocab_size, an id past it an error naming it at its forward).
  int64_t vocab_size = cfg.get_int("model.vocab_size");
  if (cfg.get_string("data.train_bin").empty()) {
    const data::TextTokenizer tok{cfg.get_string("data.tokenizer"), cfg.get_int("data.bpe_vocab_size"),
                                  cfg.get_string("data.tokenizer_json")};
    cache = data::tokenize_text_cached(cfg.get_string("data.text"), cfg.get_string("data.cache_dir"),
                                       cfg.get_float("data.val_fraction"), tok);
    BOOSTER_CHECK(vocab_size == 0 || vocab_size == cache.vocab_size, "model.vocab_size (", vocab_size,
                  ") is for token files; the text's tokenizer gives ", cache.vocab_size);
    return cache.vocab_size;
  }
  cache.train_bin = cfg.get_string("data.train_bin"), cache.val_bin = cfg.get_string("data.val_bin");
  BOOSTER_CHECK(!cache.val_bin.empty(), "data.train_bin needs data.val_bin (the validation tokens)");
  BOOSTER_CHECK(vocab_size > 0, "data.train_bin needs model.vocab_size (the token files carry no vocabulary)");
  return vocab_size;
}

LmModel lm_run_model(const Config& cfg) {
  data::TextCache cache;
  const int64_t vocab = lm_text_cache(cfg, cache);
  return make_lm_model(cfg, vocab, cfg.get_int("train.block_size"));
}

LmRun make_lm_run(const Config& cfg, int dp, Plugin* plugin, Booster* booster, int lr_replicas) {
  const int64_t iters = cfg.get_int("train.max_iters"), every = cfg.get_int("train.eval_interval");
  BOOSTER_CHECK(iters % every == 0, "train.max_iters (", iters, ") must be a multiple of train.eval_interval (", every, ")");
  LmRun r;
  data::TextCache cache;
  const int64_t vocab_size = lm_text_cache(cfg, cache);
  r.codec.chars = cache.vocab;
  if (!cache.tokenizer_json.empty())
    r.codec.bpe = std::make_shared<data::ByteLevelBPE>(data::ByteLevelBPE::from_tokenizer_json(cache.tokenizer_json));
  r.model = make_lm_model(cfg, vocab_size, cfg.get_int("train.block_size"));
  for (auto& p : r.model.module->parameters()) r.parameters += p.numel();
  if (booster) enable_lora_from_config(*booster, r.model.module, cfg);  // before the optimizer: it takes what trains
  const std::string scaling = cfg.get_string("train.lr_scaling");
  BOOSTER_CHECK(scaling == "none" || scaling == "dp", "train.lr_scaling = '", scaling, "': expected \"none\" or \"dp\"");
  optim::AdamOptions ao;
  ao.lr = cfg.get_float("train.lr") * (scaling == "dp" ? (lr_replicas > 0 ? lr_replicas : dp) : 1);
  ao.beta1 = cfg.get_float("train.beta1"), ao.beta2 = cfg.get_float("train.beta2");
  ao.weight_decay = cfg.get_float("train.weight_decay");
  r.optimizer =
      std::make_shared<optim::AdamW>(optim::param_groups_no_decay(nn::trainable_parameters(*r.model.module), ao.weight_decay), ao);
  r.scheduler = std::make_shared<optim::CosineAnnealingWarmupLR>(*r.optimizer, cfg.get_int("train.lr_decay_iters"),
                                                                 cfg.get_int("train.warmup_iters"), cfg.get_float("train.min_lr"));
  const int64_t b = cfg.get_int("train.batch_size");
  data::DataLoaderOptions lo;
  lo.batch_size = b;
  lo.drop_last = true;
  lo.seed = uint64_t(cfg.get_int("train.seed"));
  // Counted in global batches (b x dp x accumulation), so any layout of one global batch
  // trains on and scores the same windows.
  const int64_t global = b * dp * cfg.get_int("train.gradient_accumulation");
  auto train = windows(cache.train_bin, cfg, size_t(every * global));
  r.train_loader = plugin ? plugin->prepare_dataloader(train, lo) : std::make_shared<data::DataLoader>(train, lo);
  auto val = windows(cache.val_bin, cfg, size_t(cfg.get_int("train.eval_iters") * global));
  const int rank = plugin ? plugin->dp_rank() : 0;
  r.val_loader = std::make_shared<data::DataLoader>(val, lo, std::make_shared<data::InferenceShardSampler>(val->size(), dp, rank));
  if (const int64_t n = cfg.get_int("train.final_eval_iters"); n > 0) {
    auto more = windows(cache.val_bin, cfg, size_t(n * global));
    r.final_val_loader =
        std::make_shared<data::DataLoader>(more, lo, std::make_shared<data::InferenceShardSampler>(more->size(), dp, rank));
  }
  r.evaluations = iters / every;
  // The vocabulary beside config.json in every checkpoint: vocab.json (characters) or
  // tokenizer.json (BPE); none for token files.
  const std::string vocab = !cache.vocab.chars.empty() ? nlohmann::json{{"itos", cache.vocab.chars}}.dump() + "\n"
                            : r.codec.bpe                ? r.codec.bpe->to_json_string()
                                                         : "";
  const std::string vocab_file = r.codec.bpe ? "tokenizer.json" : "vocab.json";
  r.side_files = [config = r.model.config_json, vocab, vocab_file](const std::string& step_dir) -> std::vector<std::string> {
    write_file_atomic((fs::path(step_dir) / "config.json").string(), config);
    if (vocab.empty()) return {"config.json"};  // token files: no vocabulary to name
    write_file_atomic((fs::path(step_dir) / vocab_file).string(), vocab);
    return {"config.json", vocab_file};
  };
  if (booster) r.side_files = with_lora_side_file(std::move(r.side_files), *booster);
  return r;
}

std::vector<int64_t> TextCodec::encode(const std::string& text) const {
  if (bpe) return bpe->encode(text);
  std::vector<int64_t> ids;
  for (unsigned char ch : text) ids.push_back(chars.encode(ch));
  return ids;
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const { return bpe ? bpe->decode(ids) : chars.decode(ids); }

TextCodec load_codec(const std::string& dir) {
  TextCodec c;
  const fs::path tok = fs::path(dir) / "tokenizer.json", voc = fs::path(dir) / "vocab.json";
  if (fs::exists(tok)) {
    c.bpe = std::make_shared<data::ByteLevelBPE>(data::ByteLevelBPE::from_tokenizer_json(tok.string()));
    return c;
  }
  BOOSTER_CHECK_T(IOError, fs::exists(voc), dir, " holds neither tokenizer.json nor vocab.json (a run on token files has no text)");
  const auto j = nlohmann::json::parse(read_text_file(voc.string()), nullptr, false);
  BOOSTER_CHECK_T(IOError, j.is_object() && j.contains("itos") && j["itos"].is_string() && !j["itos"].empty(), voc.string(),
                  ": not a vocabulary (expected {\"itos\": \"<the characters>\"})");
  c.chars = data::CharVocab{j["itos"].get<std::string>()};
  return c;
}

Criterion token_cross_entropy(const LmModel& model) {
  nn::CausalLM* lm = model.lm;
  return [lm](const Tensor& logits, const Tensor& labels) { return lm->token_loss(logits, labels); };
}

LmModel load_checkpoint_model(const std::string& checkpoints, std::string* step_dir) {
  const auto step = latest_checkpoint(checkpoints);
  BOOSTER_CHECK_T(IOError, step.has_value(), "no complete checkpoint under '", checkpoints, "'");
  const fs::path dir = *step;
  LmModel model = lm_model_from_config_file((dir / "config.json").string());
  Booster booster;
  load_run_model(booster, *booster.boost(model.module).model, dir.string());
  if (step_dir) *step_dir = dir.string();
  return model;
}

std::string generate_text(LmModel& model, const TextCodec& codec, const std::string& start, const nn::GenerateOptions& o) {
  const std::vector<int64_t> ids = codec.encode(start);
  BOOSTER_CHECK(!ids.empty(), "the text to continue must hold at least one character");
  const Tensor out = nn::generate_in_eval(*model.module, *model.lm, Tensor::from_ints(ids, {1, int64_t(ids.size())}), o);
  const std::vector<int64_t> all = out.to_int_vector();
  return codec.decode(std::vector<int64_t>(all.begin() + int64_t(ids.size()), all.end()));
}

std::string sample_text(LmModel& model, const TextCodec& codec, const Config& cfg) {
  if (codec.empty()) return "";  // token files: no text to write with
  nn::GenerateOptions o;
  o.max_new_tokens = cfg.get_int("sample.max_new_tokens");
  o.temperature = cfg.get_float("sample.temperature");
  o.top_k = cfg.get_int("sample.top_k");
  o.seed = uint64_t(cfg.get_int("sample.seed"));
  return generate_text(model, codec, cfg.get_string("sample.start"), o);
}

}  // namespace booster::examples
