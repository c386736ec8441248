// GPT-2 and LLaMA folders as transformers writes and reads them: save_pretrained then
// *_from_pretrained gives the same logits; files with a bare base model (no "transformer." /
// "model." prefix), with transformers' attention buffers or old rotary buffers, and without
// a tied head's lm_head.weight load; a size mismatch names the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/autograd/grad_mode.h"
#include "core/common/file_util.h"
#include "nn/llmc.h"
#include "nn/pretrained.h"
#include "nn/safetensors.h"
#include "tests/support/fixtures.h"

using namespace booster;
using namespace booster::nn;
using testkit::error_of;
namespace fs = std::filesystem;

namespace {

template <typename M>
std::vector<float> logits(M& m) {
  NoGradGuard ng;
  m.eval();
  return m(Tensor::from_ints({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4})).logits.to_vector();
}

// Rewrites dir's model.safetensors: `prefix` taken off every name, `extra` tensors added.
void rewrite(const fs::path& dir, const std::string& prefix, const StateDict& extra) {
  StateDict out;
  for (auto& [n, t] : load_safetensors_dir(dir.string())) out.emplace_back(n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n, t);
  for (auto& e : extra) out.push_back(e);
  save_safetensors((dir / "model.safetensors").string(), out);
}

}  // namespace

TEST(PretrainedLM, Gpt2FolderRoundTripsAsTransformersWritesIt) {
  manual_seed(21);
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));
  const fs::path dir = testkit::temp_path("gpt2_folder");
  save_pretrained(m, dir.string());
  for (auto& [n, t] : load_safetensors_dir(dir.string())) EXPECT_NE(n, "lm_head.weight");  // tied: not saved
  EXPECT_EQ(logits(*gpt2_from_pretrained(dir.string())), logits(m));
  // A bare GPT2Model's names with transformers' causal-mask buffers.
  rewrite(dir, "transformer.", {{"h.0.attn.bias", Tensor::ones({1, 1, 64, 64})}, {"h.0.attn.masked_bias", Tensor::ones({})}});
  EXPECT_EQ(logits(*gpt2_from_pretrained(dir.string())), logits(m));
  // Another width: the mismatch named.
  GPT2Config wide = GPT2Config::preset("gpt2-tiny");
  wide.n_embd = 64;
  GPT2LMHeadModel w(wide);
  save_pretrained(w, dir.string());
  auto cfg = GPT2Config::preset("gpt2-tiny");
  cfg.save((dir / "config.json").string());
  EXPECT_NE(error_of([&] { gpt2_from_pretrained(dir.string()); }).find("size mismatch for transformer.wte.weight"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(PretrainedLM, LlamaFolderRoundTripsAsTransformersWritesIt) {
  manual_seed(22);
  LlamaForCausalLM m(LlamaConfig::preset("llama-tiny"));
  const fs::path dir = testkit::temp_path("llama_folder");
  save_pretrained(m, dir.string());
  EXPECT_EQ(logits(*llama_from_pretrained(dir.string())), logits(m));
  rewrite(dir, "model.", {{"layers.0.self_attn.rotary_emb.inv_freq", Tensor::ones({4})}});
  EXPECT_EQ(logits(*llama_from_pretrained(dir.string())), logits(m));
  EXPECT_NE(error_of([&] { gpt2_from_pretrained(dir.string()); }).find("model_type 'llama' is not a GPT-2 config"),
            std::string::npos);
  fs::remove_all(dir);
}

// llm.c's gpt2_124M.bin layout: save_llmc then gpt2_from_llmc gives the same logits; a file
// whose every float is its own index maps llm.c's [out, in] linears onto Conv1D's [in, out]
// at the offsets llm.c's fill_in_parameter_sizes gives; a truncated file, a wrong magic and
// an untied model are refused by name.
TEST(PretrainedLM, Gpt2ThroughLlmcCheckpoints) {
  manual_seed(23);
  GPT2LMHeadModel m(GPT2Config::preset("gpt2-tiny"));  // tanh GELU, as llm.c's
  const fs::path dir = testkit::temp_path("llmc");
  fs::create_directories(dir);
  const std::string path = (dir / "gpt2.bin").string();
  save_llmc(m, path);
  EXPECT_EQ(fs::file_size(path), 1024 + 4 * size_t(128 * 32 + 64 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32));
  EXPECT_EQ(logits(*gpt2_from_llmc(path)), logits(m));
  // Every float its index: V 5 padded to 8, maxT 4, L 2, NH 2, C 4.
  const int64_t v = 5, vp = 8, t = 4, l = 2, c = 4, n = vp * c + t * c + l * (12 * c * c + 13 * c) + 2 * c;
  std::vector<int32_t> head(256, 0);
  const int32_t h[8] = {20240326, 3, int32_t(t), int32_t(v), int32_t(l), 2, int32_t(c), int32_t(vp)};
  std::copy(h, h + 8, head.begin());
  std::vector<float> body(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) body[size_t(i)] = float(i);
  std::string bytes(reinterpret_cast<const char*>(head.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(body.data()), body.size() * 4);
  const std::string idx = (dir / "index.bin").string();
  write_file_atomic(idx, bytes);
  auto g = gpt2_from_llmc(idx);
  std::map<std::string, Tensor> sd;
  for (auto& [name, x] : g->state_dict()) sd[name] = x;
  EXPECT_EQ(sd.at("transformer.wte.weight").shape(), (Shape{v, c}));
  EXPECT_EQ(sd.at("transformer.wpe.weight").to_vector()[0], float(vp * c));
  // qkvw follows wte, wpe, ln1w [L, C], ln1b [L, C]; layer 1's [out 2, in 3] is Conv1D's [3, 2].
  const int64_t qkvw = vp * c + t * c + 2 * l * c;
  EXPECT_EQ(sd.at("transformer.h.1.attn.c_attn.weight").shape(), (Shape{c, 3 * c}));
  EXPECT_EQ(sd.at("transformer.h.1.attn.c_attn.weight").to_vector()[size_t(3 * 3 * c + 2)], float(qkvw + 3 * c * c + 2 * c + 3));
  EXPECT_EQ(sd.at("transformer.ln_f.bias").to_vector()[0], float(n - c));
  // Damage is named.
  write_file_atomic(idx, bytes.substr(0, bytes.size() - 4));
  EXPECT_NE(error_of([&] { gpt2_from_llmc(idx); }).find("truncated or not llm.c's"), std::string::npos);
  bytes[0] = 1;
  write_file_atomic(idx, bytes);
  EXPECT_NE(error_of([&] { gpt2_from_llmc(idx); }).find("not an llm.c GPT-2 checkpoint"), std::string::npos);
  GPT2Config untied = GPT2Config::preset("gpt2-tiny");
  untied.tie_word_embeddings = false;
  EXPECT_NE(error_of([&] { save_llmc(GPT2LMHeadModel(untied), path); }).find("an untied head"), std::string::npos);
  fs::remove_all(dir);
}
