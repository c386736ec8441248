// GPT2Config JSON reading/writing and presets.
#include "nn/gpt2_config.h"

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "nn/json_config.h"

namespace booster::nn {

using nlohmann::json;

void GPT2Config::validate() const {
  BOOSTER_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "GPT2Config: n_embd ", n_embd,
                " must be a positive multiple of n_head ", n_head);
  BOOSTER_CHECK(vocab_size > 0 && n_positions > 0 && n_layer >= 0 && n_inner >= 0, "GPT2Config: vocab_size (",
                vocab_size, "), n_positions (", n_positions, ") must be positive, n_layer (", n_layer, ") and n_inner (",
                n_inner, ") not negative");
  BOOSTER_CHECK(activation_function == "gelu_new" || activation_function == "gelu_pytorch_tanh" ||
                    activation_function == "gelu",
                "GPT2Config: activation_function '", activation_function, "' is not supported (gelu_new, ",
                "gelu_pytorch_tanh, gelu)");
  for (double p : {resid_pdrop, embd_pdrop, attn_pdrop})
    BOOSTER_CHECK(p >= 0 && p < 1, "GPT2Config: dropout probabilities must be in [0, 1), got ", p);
  BOOSTER_CHECK(scale_attn_weights, "GPT2Config: scale_attn_weights = false is not supported");
}

GPT2Config GPT2Config::from_json_string(const std::string& text, const std::string& where) {
  const json j = parse_config_json(text, where);
  if (j.contains("model_type") && j["model_type"].is_string())
    BOOSTER_CHECK(j["model_type"] == "gpt2", where, ": model_type '", j["model_type"].get<std::string>(),
                  "' is not a GPT-2 config");
  for (const char* other : {"hidden_size", "num_hidden_layers", "num_attention_heads", "image_size", "rope_theta"})
    BOOSTER_CHECK(!j.contains(other), where, ": key '", other, "' is not GPT-2's (GPT-2 says n_embd, n_layer, n_head, ",
                  "n_positions): is this another model's config?");
  GPT2Config c;
  read_config_key(j, "vocab_size", c.vocab_size, where);
  read_config_key(j, "n_positions", c.n_positions, where);
  read_config_key(j, "n_embd", c.n_embd, where);
  read_config_key(j, "n_layer", c.n_layer, where);
  read_config_key(j, "n_head", c.n_head, where);
  read_config_key(j, "n_inner", c.n_inner, where);
  read_config_key(j, "activation_function", c.activation_function, where);
  read_config_key(j, "resid_pdrop", c.resid_pdrop, where);
  read_config_key(j, "embd_pdrop", c.embd_pdrop, where);
  read_config_key(j, "attn_pdrop", c.attn_pdrop, where);
  read_config_key(j, "layer_norm_epsilon", c.layer_norm_epsilon, where);
  read_config_key(j, "initializer_range", c.initializer_range, where);
  read_config_key(j, "scale_attn_weights", c.scale_attn_weights, where);
  read_config_key(j, "tie_word_embeddings", c.tie_word_embeddings, where);
  read_config_key(j, "bias", c.bias, where);
  read_config_key(j, "bos_token_id", c.bos_token_id, where);
  read_config_key(j, "eos_token_id", c.eos_token_id, where);
  read_config_key(j, "architectures", c.architectures, where);
  c.validate();
  return c;
}

GPT2Config GPT2Config::from_json_file(const std::string& path) { return from_json_string(read_text_file(path), path); }

std::string GPT2Config::to_json_string() const {
  json j{{"vocab_size", vocab_size},
         {"n_positions", n_positions},
         {"n_ctx", n_positions},
         {"n_embd", n_embd},
         {"n_layer", n_layer},
         {"n_head", n_head},
         {"n_inner", n_inner > 0 ? json(n_inner) : json(nullptr)},
         {"activation_function", activation_function},
         {"resid_pdrop", resid_pdrop},
         {"embd_pdrop", embd_pdrop},
         {"attn_pdrop", attn_pdrop},
         {"layer_norm_epsilon", layer_norm_epsilon},
         {"initializer_range", initializer_range},
         {"scale_attn_weights", scale_attn_weights},
         {"tie_word_embeddings", tie_word_embeddings},
         {"bos_token_id", bos_token_id},
         {"eos_token_id", eos_token_id},
         {"architectures", architectures},
         {"model_type", model_type}};
  if (!bias) j["bias"] = false;
  return j.dump(2) + "\n";
}

void GPT2Config::save(const std::string& path) const { write_file_atomic(path, to_json_string()); }

GPT2Config GPT2Config::preset(const std::string& name) {
  GPT2Config c;
  auto shape = [&](int64_t e, int64_t l, int64_t h) { c.n_embd = e, c.n_layer = l, c.n_head = h; };
  auto shakespeare = [&](int64_t e, int64_t l, int64_t h, int64_t block, double drop) {
    shape(e, l, h);
    c.vocab_size = 65, c.n_positions = block, c.bias = false;
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = drop;
  };
  if (name == "gpt2") shape(768, 12, 12);
  else if (name == "gpt2-medium") shape(1024, 24, 16);
  else if (name == "gpt2-large") shape(1280, 36, 20);
  else if (name == "gpt2-xl") shape(1600, 48, 25);
  else if (name == "gpt2-tiny") shakespeare(32, 2, 2, 64, 0.0), c.bias = true;
  else if (name == "shakespeare-char") shakespeare(128, 4, 4, 64, 0.0);
  else if (name == "shakespeare-char-baby") shakespeare(384, 6, 6, 256, 0.2);
  else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    BOOSTER_THROW(ValueError, "unknown GPT-2 preset '", name, "' (known: ", names, ")");
  }
  return c;
}

std::vector<std::string> GPT2Config::preset_names() {
  return {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-tiny", "shakespeare-char", "shakespeare-char-baby"};
}

}  // namespace booster::nn
