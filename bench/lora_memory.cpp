// lora_memory: per-rank memory of LoRA fine-tuning (r 8 on PEFT's default targets: the ViT's
// query and value, GPT-2's c_attn, LLaMA's q_proj and v_proj) against full fine-tuning of the
// same model under the same plugin, measured by the allocator: the model state once a step's
// activations are gone (parameters, gradients, masters, AdamW's states) and the step's peak
// (with its activations), the largest rank's. Each row runs two steps of AdamW on one
// sequence (or image) a rank; the base of a LoRA row has no gradient, master or state.
//   mpirun -np 2 lora_memory --models vit-base,gpt2-medium,llama-4l --configs ddp.toml,zero2.toml
// llama-4l: TinyLlama-1.1B's widths (2048 / 5632, 32 heads, 4 key-value heads, vocabulary
// 32000) with 4 of its 22 layers.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <sstream>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/lora.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "plugins/registry.h"
#include "run_setup.h"

using namespace booster;

namespace {

double max_mb(size_t bytes) { return dist::all_reduce_scalar(double(bytes) / (1 << 20), dist::ReduceOp::max); }

struct Row {
  double state_mb = 0, peak_mb = 0;
  int64_t trainable = 0, params = 0;
};

// One rank's row of the model's inputs: an image, or `seq` token ids (labels the same).
std::pair<Tensor, Tensor> inputs(const nn::ViTForImageClassification& v, int64_t) {
  const int64_t s = v.config().image_size;
  Tensor x = Tensor::empty({1, 3, s, s});
  Generator(2).normal_(x);
  return {x, Tensor::zeros({1}, DType::i64)};
}
template <typename LM>
std::pair<Tensor, Tensor> inputs(const LM&, int64_t seq) {
  Tensor ids = Tensor::empty({1, seq});
  Generator(3).uniform_(ids, 0, 1000);
  ids = ids.to(DType::i64);
  return {ids, ids};
}

template <typename M>
Row measure(std::function<std::shared_ptr<M>()> build, const std::string& config, int r, int64_t seq) {
  host_tier().empty_cache();
  const size_t base = host_tier().bytes_in_use();
  Row row;
  {
    manual_seed(1);
    auto m = build();
    std::string mixed;
    Booster booster(examples::make_bench_plugin(config, "fp32", mixed), mixed);
    if (r > 0) {
      nn::LoraConfig c;
      c.r = r, c.lora_alpha = 2.0 * r;
      booster.enable_lora(m, c);
    }
    for (auto& [n, p] : m->named_parameters()) {
      row.params += p.numel();
      if (p.requires_grad()) row.trainable += p.numel();
    }
    auto b = booster.boost(m, std::make_shared<optim::AdamW>(nn::trainable_parameters(*m), optim::AdamOptions{}));
    const auto [x, y] = inputs(*m, seq);
    host_tier().reset_peak();
    for (int s = 0; s < 2; ++s) {
      b.optimizer->zero_grad(false);
      booster.backward(b.model(x, y).loss, *b.optimizer);
      b.optimizer->step();
    }
    host_tier().empty_cache();
    row.state_mb = max_mb(host_tier().bytes_in_use() - base);
    row.peak_mb = max_mb(host_tier().peak_bytes() - base);
  }
  return row;
}

Row measure(const std::string& name, const std::string& config, int r, int64_t seq) {
  if (name.rfind("vit", 0) == 0) {
    return measure<nn::ViTForImageClassification>([&] {
      nn::ViTConfig c = nn::ViTConfig::preset(name);
      c.num_labels = 3;
      return std::make_shared<nn::ViTForImageClassification>(c);
    }, config, r, seq);
  }
  if (name.rfind("gpt2", 0) == 0) {
    return measure<nn::GPT2LMHeadModel>([&] {
      nn::GPT2Config c = nn::GPT2Config::preset(name);
      c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0;
      return std::make_shared<nn::GPT2LMHeadModel>(c);
    }, config, r, seq);
  }
  BOOSTER_CHECK(name == "llama-4l", "--models: vit-*, gpt2* or llama-4l, not '", name, "'");
  return measure<nn::LlamaForCausalLM>([] {
    nn::LlamaConfig c = nn::LlamaConfig::preset("tinyllama-1.1b");
    c.num_hidden_layers = 4;
    return std::make_shared<nn::LlamaForCausalLM>(c);
  }, config, r, seq);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LoRA's per-rank memory against full fine-tuning under the same plugin"};
  std::string models = "vit-base,gpt2-medium,llama-4l", configs = "none";
  int r = 8;
  int64_t seq = 256;
  app.add_option("--models", models, "comma-separated: vit-*, gpt2*, llama-4l");
  app.add_option("--configs", configs, "comma-separated plugin configs (TOML with a [plugin] table) or none");
  app.add_option("--r", r, "LoRA's rank")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens of the language models' one sequence a rank")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  dist::launch_from_openmpi();
  try {
    if (dist::world_rank() == 0)
      std::printf("%-12s %-16s %14s %12s %12s %10s %10s\n", "model", "plugin", "trainable", "state MB", "peak MB",
                  "state x", "peak x");
    for (const auto& model : split(models))
      for (const auto& config : split(configs)) {
        const Row full = measure(model, config, 0, seq), lora = measure(model, config, r, seq);
        if (dist::world_rank() != 0) continue;
        std::printf("%-12s %-16s %14lld %12.1f %12.1f %10s %10s\n", model.c_str(), config.c_str(),
                    (long long)full.trainable, full.state_mb, full.peak_mb, "", "");
        std::printf("%-12s %-16s %14lld %12.1f %12.1f %9.2fx %9.2fx   (LoRA r %d: %.3f %% of the parameters train)\n",
                    model.c_str(), config.c_str(), (long long)lora.trainable, lora.state_mb, lora.peak_mb,
                    full.state_mb / lora.state_mb, full.peak_mb / lora.peak_mb, r,
                    100.0 * double(lora.trainable) / double(lora.params));
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lora_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
