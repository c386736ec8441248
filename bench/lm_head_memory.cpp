// lm_head_memory: per-rank memory of a language model's head and its loss, with the whole
// vocabulary on every rank against vocabulary parallelism over the world (the head's rows
// split, VocabParallelLMHead1D's product and vocab_parallel_cross_entropy), both in the
// same run, on GPT-2's head shape by default (vocabulary 50,257, width 768, batch 4 x 1,024
// tokens). Measured by the allocator: the peak of bytes in use above what was held before
// the forward, through forward and backward (logits, the loss's saved buffers, the
// gradients of the logits and of the head's weight). Beside the split's figure, the whole's
// scaled by this rank's share of the vocabulary: what the split saves at least (no rank
// holds a [tokens, vocabulary] tensor).
//   mpirun -np {1,2,4} lm_head_memory [--batch 4 --seq 1024 --vocab 50257 --embd 768]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "core/dist/collectives.h"
#include "core/dist/functional.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"
#include "nn/parallel/vocab_parallel.h"

using namespace booster;

namespace {

struct Measured {
  double peak_mb, seconds;
};

double mb(double bytes) { return bytes / (1 << 20); }

// The head and loss of `hidden` [N, E] over weight rows `w` [V or V/tp, E]: whole, or split by `part`.
Measured measure(const Tensor& hidden, const Tensor& w, const Tensor& targets, const nn::VocabPartition* part) {
  const auto& g = dist::ProcessGroup::world();
  Tensor h = hidden.detach().requires_grad_(true);
  Tensor weight = w.detach().requires_grad_(true);
  weight.grad();  // nothing yet
  host_tier().reset_peak();
  const double before = double(host_tier().bytes_in_use());
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits = part ? linear(dist::reduce_backward(h, g), weight) : linear(h, weight);
  Tensor loss = part ? nn::vocab_parallel_cross_entropy(logits, targets, g, *part) : cross_entropy(logits, targets);
  logits = Tensor();
  loss.backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {mb(double(host_tier().peak_bytes()) - before), seconds};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-rank memory of a language model's head and loss: whole vocabulary against vocabulary parallelism"};
  int64_t batch = 4, seq = 1024, vocab = 50257, embd = 768, divisible = 64;
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--vocab", vocab);
  app.add_option("--embd", embd);
  app.add_option("--make-vocab-size-divisible-by", divisible);
  CLI11_PARSE(app, argc, argv);
  dist::launch_from_openmpi();
  const auto& g = dist::ProcessGroup::world();
  const int64_t n = batch * seq;
  Tensor hidden = Tensor::empty({n, embd}), weight = Tensor::empty({vocab, embd});
  Generator(1).normal_(hidden);
  Generator(2).normal_(weight);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  Generator ig(3);
  for (auto& id : ids) id = int64_t(ig.next_u64() % uint64_t(vocab));
  const Tensor targets = Tensor::from_ints(ids, {n});
  const auto part = nn::VocabPartition::of(vocab, g.size(), g.rank(), divisible);
  const Tensor mine = weight.narrow(0, part.begin, part.size()).contiguous();
  const Measured whole = measure(hidden, weight, targets, nullptr);
  const Measured split = measure(hidden, mine, targets, &part);
  // The ranks' largest peak (the last rank holds fewer rows).
  Tensor peaks = Tensor::from_vector({float(whole.peak_mb), float(split.peak_mb)}, {2});
  dist::all_reduce(peaks, dist::ReduceOp::max, g);
  if (g.rank() == 0) {
    const float w = peaks.to_vector()[0], sp = peaks.to_vector()[1];
    const double share = double(part.padded_size / g.size()) / double(vocab);  // the largest rank's share
    std::printf("head + loss of %lld tokens, vocabulary %lld (padded %lld), width %lld, %d rank(s); per rank:\n",
                (long long)n, (long long)vocab, (long long)part.padded_size, (long long)embd, g.size());
    std::printf("  %-30s %10s %12s %8s\n", "", "peak MB", "whole x share", "seconds");
    std::printf("  %-30s %10.1f %12s %8.3f\n", "whole logits", double(w), "", whole.seconds);
    std::printf("  %-30s %10.1f %12.1f %8.3f\n", ("vocabulary parallel (tp " + std::to_string(g.size()) + ")").c_str(),
                double(sp), double(w) * share, split.seconds);
    std::printf("  split / whole: %.3f (a rank's share of the vocabulary: %.3f)\n", double(sp / w), share);
  }
  dist::finalize();
  return 0;
}
