// lm_sp_bench: per-rank activation memory and step time of a language model under each
// sequence-parallel layout of HybridParallelPlugin on 2 ranks, in one run: the whole model on
// each rank alone (the replica's rows and tokens), tensor parallelism of 2 without sequence
// parallelism, split_gather (Megatron's, tp 2), ring (split_gather overlapped round the tp
// group), all_to_all (Ulysses, sp 2) and ring_attn (ring attention, sp 2, zigzag shards).
// Activations:
// the bytes the allocator holds after the forward of a training step beyond what it held
// before (what the graph keeps for backward, and the outputs), on GPT-2 at 1,024 tokens or a
// tiny LLaMA at 4,096 by default. Beside each, the count of what this implementation keeps,
// in units of n tokens x width E (LLaMA's MLP width I):
//   GPT-2 block: 19 nE whole (each bias-free LayerNorm's input, normalized output and
//     weighted output; q/k/v; the context and its copy; c_fc's and GELU's outputs); tp 2
//     halves the 13 nE after the column-parallel projections, the 6 nE of the norms stays
//     whole: 12.5 nE; split_gather, Ulysses and ring attention split everything: 9.5 nE (the
//     ring keeps f32 copies of its q, k, v and its context instead). Outside the blocks:
//     the final norm's 3 nE, and the split embedding's rows (1 nE) under tp (tp2, split_gather).
//   LLaMA layer: 9 nE + 4 nI whole; tp 2: 6.5 nE + 2 nI; split: half. Outside: the final
//     norm's input (1 nE), and the split embedding's rows under tp.
// Step time: the median of 3 steps (forward, backward, optimizer) after a warm-up.
//   mpirun -np 2 lm_sp_bench [--model gpt2|llama] [--seq N] [--batch B]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "optim/adam.h"
#include "plugins/registry.h"

using namespace booster;

namespace {

struct Mode {
  std::string name, toml;  // toml: the [plugin] table ("": no plugin, the whole model alone)
};

struct Measured {
  double act_mb, step_s;
};

std::shared_ptr<nn::Module> make_model(const std::string& family, int64_t seq) {
  manual_seed(1);
  if (family == "gpt2") {
    auto c = nn::GPT2Config::preset("shakespeare-char-baby");  // 6 layers, 6 heads, 384 wide
    c.n_positions = std::max<int64_t>(c.n_positions, seq);
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0;
    return std::make_shared<nn::GPT2LMHeadModel>(c);
  }
  auto c = nn::LlamaConfig::preset("shakespeare-char-llama");  // 4 layers, 128 wide, MLP 344, 4 heads, 2 kv heads
  c.max_position_embeddings = std::max<int64_t>(c.max_position_embeddings, seq);
  return std::make_shared<nn::LlamaForCausalLM>(c);
}

// The count above for a model of `layers` layers, relative to the whole.
double theory_ratio(const std::string& family, const std::string& mode, int64_t layers) {
  const double l = double(layers), e = family == "gpt2" ? 384 : 128, i = 344;
  const bool split = mode == "split_gather" || mode == "ring" || mode == "all_to_all" || mode == "ring_attn";
  const bool tp = mode == "tp2" || mode == "split_gather" || mode == "ring";
  if (family == "gpt2") {
    const double block = mode == "whole" ? 19 : split ? 9.5 : 12.5;
    return (block * l + 3 + (tp ? 1 : 0)) / (19 * l + 3);
  }
  const double whole = 9 * e + 4 * i, layer = mode == "whole" ? whole : split ? whole / 2 : 6.5 * e + 2 * i;
  return (layer * l + e * (tp ? 2 : 1)) / (whole * l + e);
}

Measured measure(const Mode& m, const std::string& family, int64_t batch, int64_t seq) {
  auto model = make_model(family, seq);
  auto plugin = m.toml.empty() ? nullptr : plugins::make_plugin(Config::from_string(m.toml, m.name + ".toml"));
  Booster booster(plugin);
  auto opt = std::make_shared<optim::AdamW>(model->named_parameters());
  auto [wrapped, optimizer, c1, d1, s1] = booster.boost(model, opt);
  Generator g(7);
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  for (auto& id : ids) id = int64_t(g.next_u64() % 65);
  const Tensor x = Tensor::from_ints(ids, {batch, seq});
  TensorMap in{{"input_ids", x}};
  auto lm = dynamic_cast<nn::CausalLM*>(model.get());
  std::vector<double> times;
  double act = 0;
  for (int step = 0; step < 4; ++step) {
    optimizer->zero_grad();
    dist::barrier(dist::ProcessGroup::world());
    const auto t0 = std::chrono::steady_clock::now();
    const double before = double(host_tier().bytes_in_use());
    TensorMap out = wrapped->forward_named(in);
    Tensor loss = lm->token_loss(out.at("logits"), x);
    if (step == 1) act = double(host_tier().bytes_in_use()) - before;
    optimizer->backward(loss);
    optimizer->step();
    if (step > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {act / (1 << 20), times[times.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-rank activations and step time of a language model under each sequence-parallel layout"};
  std::string family = "gpt2";
  int64_t seq = 0, batch = 1;
  app.add_option("--model", family)->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--seq", seq, "tokens a row (default: 1024 for GPT-2, 4096 for LLaMA)");
  app.add_option("--batch", batch);
  CLI11_PARSE(app, argc, argv);
  if (seq == 0) seq = family == "gpt2" ? 1024 : 4096;
  dist::launch_from_openmpi();
  BOOSTER_CHECK(dist::world_size() == 2, "lm_sp_bench runs on 2 ranks (mpirun -np 2)");
  const std::string h = "[plugin]\nname = 'hybrid_parallel'\nprecision = 'fp32'\n";
  const std::vector<Mode> modes = {
      {"whole", ""},
      {"tp2", h + "tp_size = 2\n"},
      {"split_gather", h + "tp_size = 2\nenable_sequence_parallelism = true\n"},
      {"ring", h + "tp_size = 2\nenable_sequence_parallelism = true\nsequence_parallelism_mode = 'ring'\n"},
      {"all_to_all", h + "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'all_to_all'\nsp_size = 2\n"},
      {"ring_attn", h + "enable_sequence_parallelism = true\nsequence_parallelism_mode = 'ring_attn'\nsp_size = 2\n"},
  };
  std::vector<Measured> got;
  for (const Mode& m : modes) got.push_back(measure(m, family, batch, seq));
  if (dist::world_rank() == 0) {
    std::printf("%s, %lld x %lld tokens a replica, 2 ranks x %d threads; per rank:\n", family.c_str(), (long long)batch,
                (long long)seq, dist::omp_threads());
    std::printf("  %-13s %12s %8s %8s %9s\n", "layout", "activations", "/ whole", "theory", "step (s)");
    for (size_t i = 0; i < modes.size(); ++i)
      std::printf("  %-13s %9.1f MB %8.3f %8.3f %9.3f\n", modes[i].name.c_str(), got[i].act_mb, got[i].act_mb / got[0].act_mb,
                  theory_ratio(family, modes[i].name, family == "gpt2" ? 6 : 4), got[i].step_s);
  }
  dist::finalize();
  return 0;
}
