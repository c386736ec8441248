// LlamaConfig JSON reading/writing and presets.
#include "nn/llama_config.h"

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "nn/json_config.h"

namespace booster::nn {

using nlohmann::json;

void LlamaConfig::validate() const {
  BOOSTER_CHECK(hidden_size > 0 && num_attention_heads > 0 && (head_dim > 0 || hidden_size % num_attention_heads == 0),
                "LlamaConfig: hidden_size ", hidden_size, " must be a positive multiple of num_attention_heads ",
                num_attention_heads, " (or head_dim given)");
  BOOSTER_CHECK(kv_heads() > 0 && num_attention_heads % kv_heads() == 0, "LlamaConfig: num_attention_heads ",
                num_attention_heads, " must be a multiple of num_key_value_heads ", kv_heads());
  BOOSTER_CHECK(dim_per_head() % 2 == 0, "LlamaConfig: the head dimension ", dim_per_head(),
                " must be even (rotary embeddings rotate pairs)");
  BOOSTER_CHECK(vocab_size > 0 && intermediate_size > 0 && max_position_embeddings > 0 && num_hidden_layers >= 0,
                "LlamaConfig: vocab_size (", vocab_size, "), intermediate_size (", intermediate_size,
                "), max_position_embeddings (", max_position_embeddings, ") must be positive, num_hidden_layers (",
                num_hidden_layers, ") not negative");
  BOOSTER_CHECK(hidden_act == "silu", "LlamaConfig: hidden_act '", hidden_act, "' is not supported (silu)");
  BOOSTER_CHECK(rms_norm_eps > 0 && rope_theta > 0, "LlamaConfig: rms_norm_eps (", rms_norm_eps, ") and rope_theta (",
                rope_theta, ") must be positive");
  BOOSTER_CHECK(attention_dropout >= 0 && attention_dropout < 1, "LlamaConfig: attention_dropout must be in [0, 1), got ",
                attention_dropout);
}

LlamaConfig LlamaConfig::from_json_string(const std::string& text, const std::string& where) {
  const json j = parse_config_json(text, where);
  if (j.contains("model_type") && j["model_type"].is_string())
    BOOSTER_CHECK(j["model_type"] == "llama", where, ": model_type '", j["model_type"].get<std::string>(),
                  "' is not a LLaMA config");
  for (const char* other : {"n_embd", "n_layer", "n_head", "n_positions", "image_size"})
    BOOSTER_CHECK(!j.contains(other), where, ": key '", other, "' is not LLaMA's (LLaMA says hidden_size, ",
                  "num_hidden_layers, num_attention_heads, max_position_embeddings): is this another model's config?");
  BOOSTER_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), where,
                ": rope_scaling is not supported (rotary embeddings at rope_theta only)");
  BOOSTER_CHECK(!j.contains("pretraining_tp") || j["pretraining_tp"].is_null() || j["pretraining_tp"] == 1, where,
                ": pretraining_tp other than 1 is not supported");
  LlamaConfig c;
  read_config_key(j, "vocab_size", c.vocab_size, where);
  read_config_key(j, "hidden_size", c.hidden_size, where);
  read_config_key(j, "intermediate_size", c.intermediate_size, where);
  read_config_key(j, "num_hidden_layers", c.num_hidden_layers, where);
  read_config_key(j, "num_attention_heads", c.num_attention_heads, where);
  read_config_key(j, "num_key_value_heads", c.num_key_value_heads, where);
  read_config_key(j, "head_dim", c.head_dim, where);
  read_config_key(j, "hidden_act", c.hidden_act, where);
  read_config_key(j, "max_position_embeddings", c.max_position_embeddings, where);
  read_config_key(j, "initializer_range", c.initializer_range, where);
  read_config_key(j, "rms_norm_eps", c.rms_norm_eps, where);
  read_config_key(j, "rope_theta", c.rope_theta, where);
  read_config_key(j, "attention_bias", c.attention_bias, where);
  read_config_key(j, "mlp_bias", c.mlp_bias, where);
  read_config_key(j, "attention_dropout", c.attention_dropout, where);
  read_config_key(j, "tie_word_embeddings", c.tie_word_embeddings, where);
  read_config_key(j, "bos_token_id", c.bos_token_id, where);
  read_config_key(j, "eos_token_id", c.eos_token_id, where);
  read_config_key(j, "architectures", c.architectures, where);
  c.validate();
  return c;
}

LlamaConfig LlamaConfig::from_json_file(const std::string& path) { return from_json_string(read_text_file(path), path); }

std::string LlamaConfig::to_json_string() const {
  json j{{"vocab_size", vocab_size},
         {"hidden_size", hidden_size},
         {"intermediate_size", intermediate_size},
         {"num_hidden_layers", num_hidden_layers},
         {"num_attention_heads", num_attention_heads},
         {"num_key_value_heads", kv_heads()},
         {"head_dim", dim_per_head()},
         {"hidden_act", hidden_act},
         {"max_position_embeddings", max_position_embeddings},
         {"initializer_range", initializer_range},
         {"rms_norm_eps", rms_norm_eps},
         {"rope_theta", rope_theta},
         {"rope_scaling", nullptr},
         {"pretraining_tp", 1},
         {"attention_bias", attention_bias},
         {"mlp_bias", mlp_bias},
         {"attention_dropout", attention_dropout},
         {"tie_word_embeddings", tie_word_embeddings},
         {"use_cache", true},
         {"bos_token_id", bos_token_id},
         {"eos_token_id", eos_token_id},
         {"architectures", architectures},
         {"model_type", model_type}};
  return j.dump(2) + "\n";
}

void LlamaConfig::save(const std::string& path) const { write_file_atomic(path, to_json_string()); }

LlamaConfig LlamaConfig::preset(const std::string& name) {
  LlamaConfig c;
  auto shape = [&](int64_t e, int64_t mlp, int64_t l, int64_t h, int64_t kv, int64_t pos) {
    c.hidden_size = e, c.intermediate_size = mlp, c.num_hidden_layers = l, c.num_attention_heads = h;
    c.num_key_value_heads = kv, c.max_position_embeddings = pos;
  };
  if (name == "llama-tiny") shape(32, 64, 2, 4, 2, 64), c.vocab_size = 65;
  else if (name == "shakespeare-char-llama") shape(128, 344, 4, 4, 2, 64), c.vocab_size = 65, c.rms_norm_eps = 1e-5;
  else if (name == "tinyllama-1.1b") shape(2048, 5632, 22, 32, 4, 2048), c.rms_norm_eps = 1e-5;
  else if (name == "llama-2-7b") shape(4096, 11008, 32, 32, 32, 4096), c.rms_norm_eps = 1e-5;
  else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    BOOSTER_THROW(ValueError, "unknown LLaMA preset '", name, "' (known: ", names, ")");
  }
  return c;
}

std::vector<std::string> LlamaConfig::preset_names() {
  return {"llama-tiny", "shakespeare-char-llama", "tinyllama-1.1b", "llama-2-7b"};
}

}  // namespace booster::nn
