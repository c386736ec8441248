// llm.c's GPT-2 checkpoint format (see llmc.h).
#include "nn/llmc.h"

#include <cstring>
#include <map>

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "nn/pretrained.h"

namespace booster::nn {

namespace {

constexpr int32_t kMagic = 20240326, kVersion = 3;
constexpr size_t kHeaderInts = 256;

// One of llm.c's tensors: the transformers name of each layer's piece ({} for the layer
// index), its shape per layer, and whether llm.c keeps it [out, in] where transformers'
// Conv1D keeps [in, out].
struct LlmcTensor {
  std::string name;
  Shape shape;
  bool transposed = false;
};

// llm.c's order (fill_in_parameter_sizes), after wte and wpe.
std::vector<LlmcTensor> layer_tensors(int64_t c) {
  return {{"ln_1.weight", {c}},
          {"ln_1.bias", {c}},
          {"attn.c_attn.weight", {3 * c, c}, true},
          {"attn.c_attn.bias", {3 * c}},
          {"attn.c_proj.weight", {c, c}, true},
          {"attn.c_proj.bias", {c}},
          {"ln_2.weight", {c}},
          {"ln_2.bias", {c}},
          {"mlp.c_fc.weight", {4 * c, c}, true},
          {"mlp.c_fc.bias", {4 * c}},
          {"mlp.c_proj.weight", {c, 4 * c}, true},
          {"mlp.c_proj.bias", {c}}};
}

std::string layer_name(int64_t l, const std::string& piece) { return "transformer.h." + std::to_string(l) + "." + piece; }

}  // namespace

std::shared_ptr<GPT2LMHeadModel> gpt2_from_llmc(const std::string& path) {
  const std::string bytes = read_text_file(path);
  BOOSTER_CHECK_T(IOError, bytes.size() >= kHeaderInts * 4, path, ": ", bytes.size(),
                  " bytes, shorter than llm.c's 1024-byte header");
  int32_t h[kHeaderInts];
  std::memcpy(h, bytes.data(), sizeof h);
  BOOSTER_CHECK_T(IOError, h[0] == kMagic, path, ": not an llm.c GPT-2 checkpoint (magic ", h[0], ", expected ", kMagic, ")");
  BOOSTER_CHECK_T(IOError, h[1] == kVersion, path, ": llm.c checkpoint version ", h[1], "; only version 3 (fp32) is read");
  const int64_t max_t = h[2], v = h[3], layers = h[4], heads = h[5], c = h[6], vp = h[7];
  BOOSTER_CHECK_T(IOError, max_t > 0 && v > 0 && layers > 0 && heads > 0 && c > 0 && c % heads == 0 && vp >= v, path,
                  ": the header's sizes do not fit together (max_seq_len ", max_t, ", vocab_size ", v, ", num_layers ",
                  layers, ", num_heads ", heads, ", channels ", c, ", padded_vocab_size ", vp, ")");
  const int64_t per_layer = 12 * c * c + 13 * c;
  const int64_t params = vp * c + max_t * c + layers * per_layer + 2 * c;
  BOOSTER_CHECK_T(IOError, int64_t(bytes.size()) == int64_t(kHeaderInts * 4) + params * 4, path, ": ", bytes.size(),
                  " bytes, and its header says ", kHeaderInts * 4 + size_t(params) * 4,
                  " (the header and ", params, " fp32 parameters): truncated or not llm.c's");
  GPT2Config cfg;
  cfg.vocab_size = v, cfg.n_positions = max_t, cfg.n_embd = c, cfg.n_layer = layers, cfg.n_head = heads;
  cfg.activation_function = "gelu_new";  // llm.c's gelu_forward: the tanh approximation
  cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0;
  cfg.validate();
  const float* p = reinterpret_cast<const float*>(bytes.data() + kHeaderInts * 4);
  auto take = [&p](const Shape& s) {
    Tensor t = Tensor::empty(s);
    std::memcpy(t.raw_data(), p, size_t(t.numel()) * 4);
    p += t.numel();
    return t;
  };
  std::map<std::string, Tensor> given;
  given["transformer.wte.weight"] = take({vp, c}).narrow(0, 0, v).contiguous();
  given["transformer.wpe.weight"] = take({max_t, c});
  for (const LlmcTensor& t : layer_tensors(c))
    for (int64_t l = 0; l < layers; ++l) {
      Tensor x = take(t.shape);
      given[layer_name(l, t.name)] = t.transposed ? x.transpose(0, 1).contiguous() : x;
    }
  given["transformer.ln_f.weight"] = take({c});
  given["transformer.ln_f.bias"] = take({c});
  auto model = std::make_shared<GPT2LMHeadModel>(cfg);
  load_pretrained_state(*model, given, path, "GPT2LMHeadModel", false);
  return model;
}

void save_llmc(const GPT2LMHeadModel& model, const std::string& path, int64_t padded_vocab) {
  const GPT2Config& cfg = model.config();
  BOOSTER_CHECK(cfg.tie_word_embeddings && cfg.bias, "save_llmc: llm.c's GPT-2 has biases and its head tied to wte; "
                "this model has ", cfg.bias ? "" : "no biases", !cfg.bias && !cfg.tie_word_embeddings ? " and " : "",
                cfg.tie_word_embeddings ? "" : "an untied head");
  const int64_t v = cfg.vocab_size, c = cfg.n_embd, vp = padded_vocab > 0 ? padded_vocab : (v + 127) / 128 * 128;
  BOOSTER_CHECK(vp >= v, "save_llmc: padded_vocab ", vp, " is below the vocabulary's ", v, " tokens");
  std::map<std::string, Tensor> sd;
  for (auto& [name, t] : model.state_dict()) sd[name] = t;
  auto at = [&](const std::string& name) {
    auto it = sd.find(name);
    BOOSTER_CHECK(it != sd.end(), "save_llmc: the model has no tensor '", name, "'");
    return it->second.to(DType::f32).contiguous();
  };
  std::string out(kHeaderInts * 4, '\0');
  const int32_t head[8] = {kMagic, kVersion, int32_t(cfg.n_positions), int32_t(v), int32_t(cfg.n_layer),
                           int32_t(cfg.n_head), int32_t(c), int32_t(vp)};
  std::memcpy(out.data(), head, sizeof head);
  auto put = [&out](const Tensor& t) { out.append(static_cast<const char*>(t.raw_data()), size_t(t.numel()) * 4); };
  put(at("transformer.wte.weight"));
  out.append(size_t((vp - v) * c) * 4, '\0');  // llm.c's padding rows: zeros
  put(at("transformer.wpe.weight"));
  for (const LlmcTensor& t : layer_tensors(c))
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      Tensor x = at(layer_name(l, t.name));
      put(t.transposed ? x.transpose(0, 1).contiguous() : x);
    }
  put(at("transformer.ln_f.weight"));
  put(at("transformer.ln_f.bias"));
  write_file_atomic(path, out);
}

}  // namespace booster::nn
