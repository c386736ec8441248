// The model the conformance suite runs, one test binary each: the tiny ViT on images
// (conformance_test), or GPT-2 (BOOSTER_CONFORMANCE_GPT2) or LLaMA (BOOSTER_CONFORMANCE_LLAMA)
// of 4 layers on windows of 8 tokens (conformance_gpt2_test, conformance_llama_test), under
// one case of each plugin kind, tensor parallelism with the vocabulary split among them
// and the pipelines (GPT-2's head tied to its embeddings across the first and last stage).
#pragma once

#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/parallel/vocab_parallel.h"
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
constexpr bool kConfPipelines = true;
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
// The model's own shifted loss (vocabulary-parallel where a policy split the head).
inline Tensor conf_loss(nn::Module& model, const Tensor& logits, const Tensor& labels) {
  const int64_t t = logits.size(1);
  return dynamic_cast<nn::CausalLM&>(model).token_loss(logits.narrow(1, 0, t - 1), labels.narrow(1, 1, t - 1));
}
// The columns of the whole logits this rank's logits hold: a split head's rows, else all.
inline std::pair<int64_t, int64_t> conf_logit_columns(nn::Module& model, int64_t classes) {
  for (auto& [path, m] : model.named_modules())
    if (auto* h = dynamic_cast<const nn::VocabParallelHead*>(m.get()); h && !h->gathers_output())
      return {h->partition().begin, h->partition().size()};
  return {0, classes};
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
inline Tensor conf_loss(nn::Module&, const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); }
inline std::pair<int64_t, int64_t> conf_logit_columns(nn::Module&, int64_t classes) { return {0, classes}; }
#endif

}  // namespace booster::plugin_tests
