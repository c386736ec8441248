// GPT-2 and LLaMA folders as transformers writes and reads them: save_pretrained then
// *_from_pretrained gives the same logits; files with a bare base model (no "transformer." /
// "model." prefix), with transformers' attention buffers or old rotary buffers, and without
// a tied head's lm_head.weight load; a size mismatch names the tensor.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/autograd/grad_mode.h"
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
