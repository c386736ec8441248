// The model the conformance suite runs, one test binary each: the tiny ViT on images
// (conformance_test), or GPT-2 (BOOSTER_CONFORMANCE_GPT2) or LLaMA (BOOSTER_CONFORMANCE_LLAMA)
// of 4 layers on windows of 8 tokens (conformance_gpt2_test, conformance_llama_test), under
// the cases that run without a tensor-parallel policy (GPT-2's tied head keeps it to one
// pipeline stage; the untied LLaMA runs the pipelines too).
#pragma once

#include "nn/gpt2.h"
#include "nn/llama.h"
#include "tests/plugins/vit_cases.h"

namespace booster::plugin_tests {

#if defined(BOOSTER_CONFORMANCE_GPT2) || defined(BOOSTER_CONFORMANCE_LLAMA)
#ifdef BOOSTER_CONFORMANCE_GPT2
using ConfModel = nn::GPT2LMHeadModel;
inline std::shared_ptr<ConfModel> conf_model(uint64_t seed = 42, double dropout = 0.0) {
  manual_seed(seed);
  nn::GPT2Config c = nn::GPT2Config::preset("gpt2-tiny");
  c.n_layer = 4;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = dropout;
  return std::make_shared<ConfModel>(c);
}
constexpr bool kConfPipelines = false;
constexpr const char* kConfName = "gpt2";  // in the checkpoints' folder names (the binaries run at once)
#else
using ConfModel = nn::LlamaForCausalLM;
inline std::shared_ptr<ConfModel> conf_model(uint64_t seed = 42, double dropout = 0.0) {
  manual_seed(seed);
  nn::LlamaConfig c = nn::LlamaConfig::preset("llama-tiny");
  c.num_hidden_layers = 4;
  c.attention_dropout = dropout;
  return std::make_shared<ConfModel>(c);
}
constexpr bool kConfPipelines = true;
constexpr const char* kConfName = "llama";
#endif
constexpr const char* kConfInput = "input_ids";
constexpr bool kConfTensorParallel = false;
// The global batch of a step: `rows` windows of 8 token ids, the same on every rank; the
// labels are the ids (the model shifts them).
inline std::pair<Tensor, Tensor> conf_batch(int step, int64_t rows) {
  Generator g(2000 + uint64_t(step));
  std::vector<int64_t> ids(static_cast<size_t>(rows * 8));
  for (auto& id : ids) id = int64_t(g.next_u64() % 65);
  Tensor t = Tensor::from_ints(ids, {rows, 8});
  return {t, t.clone()};
}
inline Tensor conf_loss(const Tensor& logits, const Tensor& labels) {
  return nn::causal_lm_loss(logits, labels, labels, "conformance");
}
#else
using ConfModel = nn::ViTForImageClassification;
inline std::shared_ptr<ConfModel> conf_model(uint64_t seed = 42, double dropout = 0.0) {
  manual_seed(seed);
  nn::ViTConfig c = tiny_config();
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
  return std::make_shared<ConfModel>(c);
}
constexpr bool kConfPipelines = true;
constexpr const char* kConfName = "vit";
constexpr const char* kConfInput = "pixel_values";
constexpr bool kConfTensorParallel = true;
inline std::pair<Tensor, Tensor> conf_batch(int step, int64_t rows) { return global_batch(step, rows); }
inline Tensor conf_loss(const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); }
#endif

}  // namespace booster::plugin_tests
