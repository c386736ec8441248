// GPT2Config: Hugging Face's GPT-2 configuration (same keys and defaults), read from and
// written to config.json, plus the named presets (gpt2, gpt2-medium, gpt2-large, gpt2-xl,
// nanoGPT's shakespeare-char shapes).
#pragma once

#include <string>
#include <vector>

namespace booster::nn {

/// Hugging Face GPT2Config.
struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 (transformers' null): 4 * n_embd
  std::string activation_function = "gelu_new";
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  bool scale_attn_weights = true;
  bool tie_word_embeddings = true;
  /// Biases in the linears and layer norms (nanoGPT's `bias`; transformers' GPT-2 always has
  /// them and ignores the key).
  bool bias = true;
  int64_t bos_token_id = 50256, eos_token_id = 50256;
  std::vector<std::string> architectures{"GPT2LMHeadModel"};
  std::string model_type = "gpt2";

  /// The MLP width: n_inner, or 4 * n_embd.
  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  /// Throws ValueError naming the key when sizes do not fit together or a value is not supported.
  void validate() const;

  /// Parses config.json; missing keys take transformers' defaults; a key of another model
  /// (a LLaMA config's hidden_size, a ViT's image_size) or of the wrong type is an error naming it.
  static GPT2Config from_json_file(const std::string& path);
  static GPT2Config from_json_string(const std::string& text, const std::string& where = "config.json");
  /// Serializes with transformers' keys.
  std::string to_json_string() const;
  /// Writes config.json atomically.
  void save(const std::string& path) const;

  /// gpt2 (124M: 768 / 12 layers / 12 heads), gpt2-medium (1024/24/16), gpt2-large
  /// (1280/36/20), gpt2-xl (1600/48/25), gpt2-tiny (tests: 32/2/2, vocabulary 65, 64
  /// positions, no dropout), shakespeare-char (nanoGPT's CPU recipe: 128/4/4, vocabulary 65, block 64,
  /// no biases, dropout 0), shakespeare-char-baby (384/6/6, block 256, dropout 0.2); throws
  /// listing the names.
  static GPT2Config preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace booster::nn
