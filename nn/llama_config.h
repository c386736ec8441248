// LlamaConfig: Hugging Face's LLaMA configuration (same keys and defaults), read from and
// written to config.json, plus presets: llama-tiny (tests), shakespeare-char-llama
// (the character recipe's LLaMA), TinyLlama-1.1B's and Llama-2-7B's shapes.
#pragma once

#include <string>
#include <vector>

namespace booster::nn {

/// Hugging Face LlamaConfig.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0 (transformers' null): num_attention_heads
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool attention_bias = false, mlp_bias = false;
  double attention_dropout = 0.0;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 1, eos_token_id = 2;
  std::vector<std::string> architectures{"LlamaForCausalLM"};
  std::string model_type = "llama";

  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t dim_per_head() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  /// Throws ValueError naming the key when sizes do not fit together or a value is not
  /// supported (rope_scaling, pretraining_tp > 1, an activation other than silu).
  void validate() const;

  /// Parses config.json; missing keys take transformers' defaults; a key of another model
  /// (GPT-2's n_embd) or of the wrong type is an error naming it.
  static LlamaConfig from_json_file(const std::string& path);
  static LlamaConfig from_json_string(const std::string& text, const std::string& where = "config.json");
  std::string to_json_string() const;
  void save(const std::string& path) const;

  /// llama-tiny (tests: 32 wide, 2 layers, 4 heads, 2 key/value heads, MLP 64, vocabulary
  /// 65, 64 positions), shakespeare-char-llama (128 wide, 4 layers, 4 heads, 2 key/value
  /// heads, MLP 344, vocabulary 65, 64 positions), tinyllama-1.1b (2048, 22 layers, 32 heads,
  /// 4 key/value heads, MLP 5632, 2048 positions), llama-2-7b (4096, 32 layers, 32 heads,
  /// MLP 11008, 4096 positions); throws listing the names.
  static LlamaConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace booster::nn
