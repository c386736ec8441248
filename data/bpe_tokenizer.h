// GPT-2's byte-level BPE (Hugging Face tokenizers' ByteLevel pre-tokenizer, BPE model and
// ByteLevel decoder): text is split by GPT-2's pattern (contractions, letters, numbers,
// other symbols, spaces; PCRE2 with Unicode classes), each piece's bytes become printable
// characters (bytes_to_unicode), and merges join them by rank. Any UTF-8 text encodes and
// decodes back exactly. Loads and saves Hugging Face's tokenizer.json (a GPT-2 one a user has
// loads); trains on a corpus as the BpeTrainer does (the most frequent adjacent pair merged
// until vocab_size). Other models (Unigram, WordPiece) and SentencePiece-style BPE
// (Metaspace, byte_fallback: LLaMA's) are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace booster::data {

class ByteLevelBPE {
 public:
  /// Hugging Face's tokenizer.json; an unsupported model, pre-tokenizer or decoder is an
  /// error naming it and the file.
  static ByteLevelBPE from_tokenizer_json(const std::string& path);
  static ByteLevelBPE from_json_string(const std::string& text, const std::string& where = "tokenizer.json");
  /// Trains on `text`: the 256 byte characters, then merges of the most frequent adjacent
  /// pair (ties: the smaller pair, by its two tokens) until vocab_size tokens or no pair
  /// occurs twice.
  static ByteLevelBPE train(const std::string& text, int64_t vocab_size);

  /// Ids of `text` (valid UTF-8; invalid bytes are an error naming their offset).
  std::vector<int64_t> encode(const std::string& text) const;
  /// The text of `ids` (an id past the vocabulary is an error naming it); bytes that are not
  /// whole UTF-8 characters (a sample can stop inside one) become U+FFFD, as Hugging Face's
  /// ByteLevel decoder writes them.
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }

  /// tokenizer.json as the tokenizers library writes a ByteLevel BPE.
  std::string to_json_string() const;
  void save(const std::string& path) const;

 private:
  void index();  // ranks and ids from tokens_ and merges_
  std::vector<std::string> bpe(const std::string& piece) const;  // a piece's tokens (byte characters merged)

  std::vector<std::string> tokens_;  // id -> token (byte characters as UTF-8)
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::pair<std::string, std::string>> merges_;
  std::unordered_map<std::string, int64_t> ranks_;  // "a b" -> rank
};

}  // namespace booster::data
