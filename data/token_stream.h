// Token streams for language models: a flat file of token ids, memory-mapped (nanoGPT's
// headerless train.bin / val.bin, uint16 or uint32; llm.c's .bin with its header of 256
// int32: magic 20240520, version 1 for uint16 tokens or 2 for uint32, the token count),
// cut into windows of block_size + 1 tokens: "input_ids" the first block_size, "labels"
// the next token of each (nanoGPT's get_batch). Training draws each window's start at
// random (from the sample's generator, so the DataLoader's seeding makes every rank's share
// distinct and every run repeatable); evaluation and shuffle = false take consecutive
// windows. And a text file tokenized once by characters (nanoGPT's shakespeare_char) into
// a cache folder of such files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace booster::data {

/// A read-only memory map of a token file.
class TokenFile {
 public:
  /// `dtype` gives the width of a headerless file: "uint16" (nanoGPT's default) or
  /// "uint32"; a file that opens with llm.c's magic is read by its header whatever it says.
  /// A truncated file, an unknown header version or width, or a size that is not whole
  /// tokens is an IOError naming the file.
  explicit TokenFile(const std::string& path, const std::string& dtype = "uint16");
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  /// Tokens in the file.
  int64_t size() const { return n_; }
  int64_t operator[](int64_t i) const { return width_ == 2 ? int64_t(u16()[i]) : int64_t(u32()[i]); }
  /// "llm.c" or "nanoGPT".
  const char* format() const { return header_ ? "llm.c" : "nanoGPT"; }
  int width() const { return width_; }
  const std::string& path() const { return path_; }

 private:
  const uint16_t* u16() const { return reinterpret_cast<const uint16_t*>(tokens_); }
  const uint32_t* u32() const { return reinterpret_cast<const uint32_t*>(tokens_); }
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const char* tokens_ = nullptr;
  int64_t n_ = 0;
  int width_ = 2;
  bool header_ = false;
};

/// Writes `tokens` as llm.c's .bin (header then uint16 or uint32 tokens), atomically.
void write_llmc_tokens(const std::string& path, const std::vector<int64_t>& tokens, int width = 2);
/// Writes `tokens` as nanoGPT's headerless file of uint16 or uint32, atomically.
void write_nanogpt_tokens(const std::string& path, const std::vector<int64_t>& tokens, int width = 2);

struct TokenStreamOptions {
  int64_t block_size = 256;     // tokens a window gives the model (nanoGPT's block_size)
  bool random_windows = true;   // training: random starts; false: consecutive windows
  std::string dtype = "uint16"; // a headerless file's width (data.dtype)
  DType ids_dtype = DType::i64;  // "input_ids" and "labels": i64 (PyTorch's, nanoGPT's) or i32 (half the bytes)
  size_t limit = 0;             // windows an epoch (0: the file's consecutive windows); consecutive
                                // windows stop at the file's, random ones are draws and may be more
};

/// Windows of a token file: {"input_ids": [block_size], "labels": [block_size]}, i64 or i32
/// (ids_dtype; an i32 stream refuses a uint32 file's token past 2^31 - 1 by its position).
/// An epoch is the file's whole consecutive windows (tokens - 1) / block_size, as many
/// random ones when training.
class TokenStream : public Dataset {
 public:
  TokenStream(const std::string& path, TokenStreamOptions opts = {});
  size_t size() const override { return windows_; }
  Example get(size_t index, Generator& g) const override;
  const TokenFile& file() const { return *file_; }
  const TokenStreamOptions& options() const { return opts_; }

 private:
  std::shared_ptr<TokenFile> file_;
  TokenStreamOptions opts_;
  size_t windows_ = 0;
};

/// nanoGPT's shakespeare_char: the text's distinct bytes, sorted, are the vocabulary.
struct CharVocab {
  std::string chars;  // itos: id -> byte
  int64_t encode(unsigned char c) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};

/// How tokenize_text_cached tokenizes: by characters (nanoGPT's shakespeare_char) or by
/// GPT-2's byte-level BPE (nanoGPT's shakespeare): a tokenizer.json given (GPT-2's own), or
/// one trained on the training split with bpe_vocab_size tokens.
struct TextTokenizer {
  std::string kind = "char";    // "char" or "bpe"
  int64_t bpe_vocab_size = 512;  // bpe without tokenizer_json: tokens to train
  std::string tokenizer_json;    // bpe: a tokenizer.json to use
};

/// What tokenize_text_cached made: the two token files and the vocabulary (chars, or the
/// cache's tokenizer.json for BPE).
struct TextCache {
  std::string train_bin, val_bin;
  CharVocab vocab;
  std::string tokenizer_json;  // bpe: the cache's copy
  int64_t vocab_size = 0;
};

/// Tokenizes `text_path` into `cache_dir` once (train.bin: the first 1 - val_fraction of the
/// text, val.bin: the rest, nanoGPT's split; uint16 headerless, uint32 past 65,536 tokens;
/// meta.json: the vocabulary, the tokenizer and the source's size and checksum). A cache made
/// from another text or tokenizer is made again. Processes building at once take turns on a
/// lock file in the folder: one builds, the others wait and read what it wrote (no
/// collective, so a builder that dies leaves no one waiting).
TextCache tokenize_text_cached(const std::string& text_path, const std::string& cache_dir, double val_fraction = 0.1,
                               const TextTokenizer& tokenizer = {});

}  // namespace booster::data
