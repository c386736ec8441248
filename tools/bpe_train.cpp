// bpe_train: trains GPT-2's byte-level BPE on a text and writes Hugging Face's
// tokenizer.json (data/bpe_tokenizer.h); --encode prints a text's ids with a tokenizer.json.
// Usage: bpe_train --text FILE --vocab-size N --out tokenizer.json [--max-bytes N]
//        bpe_train --tokenizer tokenizer.json --encode "some text"
#include <CLI/CLI.hpp>

#include "core/common/check.h"
#include "core/common/file_util.h"
#include "data/bpe_tokenizer.h"

using namespace booster;

int main(int argc, char** argv) {
  CLI::App app{"Train a byte-level BPE (GPT-2's) and write tokenizer.json, or encode with one"};
  std::string text, out, tokenizer, encode;
  int64_t vocab_size = 512, max_bytes = 0;
  app.add_option("--text", text, "the corpus (UTF-8)");
  app.add_option("--vocab-size", vocab_size, "tokens in all: the 256 bytes and the merges");
  app.add_option("--max-bytes", max_bytes, "train on the corpus' first N bytes (0: all)");
  app.add_option("--out", out, "the tokenizer.json to write");
  app.add_option("--tokenizer", tokenizer, "a tokenizer.json to encode with");
  app.add_option("--encode", encode, "a text to print the ids of");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!tokenizer.empty()) {
      for (int64_t id : data::ByteLevelBPE::from_tokenizer_json(tokenizer).encode(encode)) std::printf("%lld ", (long long)id);
      std::printf("\n");
      return 0;
    }
    BOOSTER_CHECK(!text.empty() && !out.empty(), "give --text and --out (or --tokenizer and --encode)");
    std::string corpus = read_text_file(text);
    if (max_bytes > 0 && size_t(max_bytes) < corpus.size()) corpus.resize(size_t(max_bytes));
    const auto bpe = data::ByteLevelBPE::train(corpus, vocab_size);
    bpe.save(out);
    std::printf("trained %lld tokens (%zu merges) on %zu bytes into %s\n", (long long)bpe.vocab_size(), bpe.merges().size(),
                corpus.size(), out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bpe_train: %s\n", e.what());
    return 1;
  }
}
