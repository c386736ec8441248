// llm.c's GPT-2 checkpoint (train_gpt2.c's gpt2_124M.bin): a header of 256 int32 (magic
// 20240326, version 3, max_seq_len, vocab_size, num_layers, num_heads, channels,
// padded_vocab_size) then every parameter in fp32, in llm.c's order (wte [Vp, C] with the
// padding rows, wpe, then each kind of tensor for all layers at once: ln1w, ln1b, qkvw
// [L, 3C, C], qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, then lnfw,
// lnfb), linears stored [out, in]. The model llm.c trains: GPT-2 with the tanh GELU, no
// dropout, the head tied to wte. Reading and writing it lets llm.c, PyTorch and this
// project start from the same weights (scripts/lm_vs_peers.sh).
#pragma once

#include <memory>
#include <string>

#include "nn/gpt2.h"

namespace booster::nn {

/// GPT-2 from llm.c's checkpoint; a bad magic or version, a header that does not fit, or a
/// file shorter or longer than its header says is an IOError naming the file.
std::shared_ptr<GPT2LMHeadModel> gpt2_from_llmc(const std::string& path);
/// Writes `model` (tied, with biases) as llm.c's checkpoint, the vocabulary padded to
/// `padded_vocab` rows (llm.c's 50,304 for GPT-2; 0: rounded up to a multiple of 128), atomically.
void save_llmc(const GPT2LMHeadModel& model, const std::string& path, int64_t padded_vocab = 0);

}  // namespace booster::nn
