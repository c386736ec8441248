// GPT-2's byte-level BPE (see bpe_tokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>
#include <tuple>
#include <queue>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/common/file_util.h"

namespace booster::data {

namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern (tokenizers' ByteLevel with use_regex).
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  else s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  return s;
}

// bytes_to_unicode: each byte a printable character (the printable Latin-1 ones as
// themselves, the others from U+0100 on), as UTF-8.
const std::vector<std::string>& byte_chars() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[size_t(b)] = utf8(printable ? uint32_t(b) : uint32_t(256 + n++));
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, unsigned char>& char_bytes() {
  static const auto table = [] {
    std::unordered_map<std::string, unsigned char> t;
    for (int b = 0; b < 256; ++b) t[byte_chars()[size_t(b)]] = static_cast<unsigned char>(b);
    return t;
  }();
  return table;
}

// The offset of the first byte of `s` that does not start a valid UTF-8 character (no
// overlong forms, surrogates or code points past U+10FFFF), or npos.
size_t invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return i;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return i;
    i += len;
  }
  return std::string::npos;
}

// bytes as UTF-8 with each invalid part (a lone continuation byte, a character cut short)
// replaced by U+FFFD, as the ByteLevel decoder's errors="replace" does: generated text can
// end a token inside a character.
std::string replace_invalid_utf8(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const size_t bad = invalid_utf8(bytes.substr(i, 4));
    const auto c = static_cast<unsigned char>(bytes[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (bad != 0) {  // the character at i is whole and valid
      out.append(bytes, i, len), i += len;
      continue;
    }
    out += "\xEF\xBF\xBD";
    size_t skip = 1;  // the lead byte and the continuation bytes that followed it
    while (len > 1 && skip < len && i + skip < bytes.size() && (static_cast<unsigned char>(bytes[i + skip]) >> 6) == 2) ++skip;
    i += skip;
  }
  return out;
}

// The pieces of `text` by GPT-2's pattern.
std::vector<std::string> pre_tokenize(const std::string& text) {
  struct Code {
    pcre2_code* c;
    ~Code() { pcre2_code_free(c); }
  };
  static const Code code = [] {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                  &err, &off, nullptr);
    BOOSTER_CHECK(c, "ByteLevelBPE: the pre-tokenizer pattern does not compile (PCRE2 error ", err, ")");
    return Code{c};
  }();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code.c, nullptr), pcre2_match_data_free);
  const size_t bad = invalid_utf8(text);
  BOOSTER_CHECK(bad == std::string::npos, "ByteLevelBPE: the text is not valid UTF-8 at byte ", bad);
  std::vector<std::string> out;
  PCRE2_SIZE at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(code.c, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, PCRE2_NO_UTF_CHECK,
                               md.get(), nullptr);
    BOOSTER_CHECK(rc > 0, "ByteLevelBPE: the pre-tokenizer failed at byte ", at, " (PCRE2 error ", rc, ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    BOOSTER_CHECK(ov[1] > ov[0], "ByteLevelBPE: an empty piece at byte ", at);
    out.emplace_back(text.substr(ov[0], ov[1] - ov[0]));
    at = ov[1];
  }
  return out;
}

// A piece's bytes as byte characters, one symbol each.
std::vector<std::string> symbols(const std::string& piece) {
  std::vector<std::string> s;
  s.reserve(piece.size());
  for (unsigned char b : piece) s.push_back(byte_chars()[b]);
  return s;
}

std::string key(const std::string& a, const std::string& b) { return a + " " + b; }

// The BpeTrainer's pair counts, kept up to date as pairs merge instead of counted again
// for every merge: each distinct pre-tokenized word once, as symbol ids, with its
// frequency; the count of every adjacent pair over them; for each pair, the words it may
// occur in; a heap of (count, pair) entries, stale ones skipped when popped. Symbols are
// strings (a merge giving a string already made is that symbol), ids standing for them.
class PairCounter {
 public:
  explicit PairCounter(const std::vector<std::string>& bytes) {
    for (const std::string& s : bytes) id_of(s);
  }
  void add_word(const std::vector<std::string>& syms, int64_t freq) {
    std::vector<int> w;
    for (const std::string& s : syms) w.push_back(id_of(s));
    words_.push_back(std::move(w));
    freq_.push_back(freq);
    count_pairs(words_.size() - 1, +1);
    flush();
  }
  const std::string& text(int id) const { return text_[size_t(id)]; }
  /// The most frequent pair (ties: the smaller pair of strings), if it occurs twice or more.
  std::optional<std::pair<int, int>> most_frequent() {
    while (!heap_.empty()) {
      const Entry e = heap_.top();
      auto it = count_.find(key(e.pair));
      if (it == count_.end() || it->second != e.count) {  // stale
        heap_.pop();
        continue;
      }
      if (e.count < 2) return std::nullopt;
      return e.pair;
    }
    return std::nullopt;
  }
  /// Replaces every occurrence of `p` (left to right) by the symbol `joined`.
  void merge(std::pair<int, int> p, const std::string& joined) {
    const int c = id_of(joined);
    std::vector<size_t> in = std::move(where_[key(p)]);
    where_.erase(key(p));
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    for (size_t w : in) {
      std::vector<int>& word = words_[w];
      count_pairs(w, -1);
      std::vector<int> next;
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == p.first && word[i + 1] == p.second) next.push_back(c), ++i;
        else next.push_back(word[i]);
      }
      word.swap(next);
      count_pairs(w, +1);
    }
    flush();
  }

 private:
  struct Entry {
    int64_t count;
    std::pair<int, int> pair;
  };
  static uint64_t key(std::pair<int, int> p) { return (uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second); }
  int id_of(const std::string& s) {
    auto [it, fresh] = ids_.emplace(s, int(text_.size()));
    if (fresh) text_.push_back(s);
    return it->second;
  }
  // Adds (+1) or removes (-1) word w's pairs from the counts, noting those that changed.
  void count_pairs(size_t w, int sign) {
    const std::vector<int>& word = words_[w];
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const std::pair<int, int> p{word[i], word[i + 1]};
      count_[key(p)] += sign * freq_[w];
      changed_.push_back(p);
      if (sign > 0) where_[key(p)].push_back(w);
    }
  }
  // Pushes the changed pairs' new counts.
  void flush() {
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
    for (const auto& p : changed_) {
      const int64_t n = count_[key(p)];
      if (n > 0) heap_.push({n, p});
      else count_.erase(key(p));
    }
    changed_.clear();
  }
  struct Later {  // the heap's order: more frequent first, then the smaller pair of strings
    const PairCounter* pc;
    bool operator()(const Entry& x, const Entry& y) const {
      if (x.count != y.count) return x.count < y.count;
      return std::tie(pc->text(x.pair.first), pc->text(x.pair.second)) >
             std::tie(pc->text(y.pair.first), pc->text(y.pair.second));
    }
  };
  std::vector<std::string> text_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::vector<int>> words_;
  std::vector<int64_t> freq_;
  std::unordered_map<uint64_t, int64_t> count_;
  std::unordered_map<uint64_t, std::vector<size_t>> where_;
  std::vector<std::pair<int, int>> changed_;
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_{Later{this}};
};


}  // namespace

void ByteLevelBPE::index() {
  ids_.clear(), ranks_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = int64_t(i);
  for (size_t r = 0; r < merges_.size(); ++r) ranks_[key(merges_[r].first, merges_[r].second)] = int64_t(r);
}

std::vector<std::string> ByteLevelBPE::bpe(const std::string& piece) const {
  std::vector<std::string> s = symbols(piece);
  while (s.size() > 1) {
    int64_t best = -1;  // the lowest-ranked merge among adjacent pairs
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = ranks_.find(key(s[i], s[i + 1]));
      if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second;
    }
    if (best < 0) break;
    const auto& [a, b] = merges_[size_t(best)];
    std::vector<std::string> next;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) next.push_back(a + b), ++i;
      else next.push_back(s[i]);
    }
    s.swap(next);
  }
  return s;
}

std::vector<int64_t> ByteLevelBPE::encode(const std::string& text) const {
  std::vector<int64_t> out;
  for (const std::string& piece : pre_tokenize(text))
    for (const std::string& t : bpe(piece)) {
      auto it = ids_.find(t);
      BOOSTER_CHECK(it != ids_.end(), "ByteLevelBPE: token '", t, "' of the piece '", piece, "' is not in the vocabulary");
      out.push_back(it->second);
    }
  return out;
}

std::string ByteLevelBPE::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    BOOSTER_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "ByteLevelBPE: id ", ids[i], " at position ", i,
                  " is outside the vocabulary of ", vocab_size());
    const std::string& t = tokens_[size_t(ids[i])];
    for (size_t k = 0; k < t.size();) {  // one UTF-8 character at a time back to its byte
      const auto c = static_cast<unsigned char>(t[k]);
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : 3;
      auto it = char_bytes().find(t.substr(k, len));
      BOOSTER_CHECK(it != char_bytes().end(), "ByteLevelBPE: token ", ids[i], " ('", t, "') is not byte-level");
      out += char(it->second);
      k += len;
    }
  }
  return replace_invalid_utf8(out);
}

ByteLevelBPE ByteLevelBPE::train(const std::string& text, int64_t vocab_size) {
  BOOSTER_CHECK(vocab_size >= 256, "ByteLevelBPE::train: vocab_size must be at least the 256 bytes, got ", vocab_size);
  ByteLevelBPE t;
  t.tokens_ = byte_chars();
  std::map<std::string, int64_t> counts;
  for (const std::string& piece : pre_tokenize(text)) ++counts[piece];
  PairCounter pc(t.tokens_);
  for (auto& [piece, n] : counts) pc.add_word(symbols(piece), n);
  while (t.vocab_size() < vocab_size) {
    const auto best = pc.most_frequent();
    if (!best) break;
    const std::string& a = pc.text(best->first), &b = pc.text(best->second);
    t.merges_.emplace_back(a, b);
    t.tokens_.push_back(a + b);
    pc.merge(*best, a + b);
  }
  t.index();
  return t;
}

ByteLevelBPE ByteLevelBPE::from_json_string(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, false);
  BOOSTER_CHECK_T(IOError, j.is_object() && j.contains("model") && j["model"].is_object(), where,
                  ": not a tokenizer.json (no \"model\" object)");
  const json& m = j["model"];
  const std::string type = m.value("type", "");
  BOOSTER_CHECK(type == "BPE", where, ": model type '", type, "' is not supported (byte-level BPE only)");
  auto kind = [&](const char* k) {
    return j.contains(k) && j[k].is_object() ? j[k].value("type", std::string("?")) : std::string("none");
  };
  BOOSTER_CHECK(!m.value("byte_fallback", false) && kind("pre_tokenizer") != "Metaspace" && kind("decoder") != "Metaspace",
                where, ": a SentencePiece-style BPE (Metaspace, byte_fallback: LLaMA's) is not supported");
  BOOSTER_CHECK(kind("pre_tokenizer") == "ByteLevel", where, ": pre_tokenizer '", kind("pre_tokenizer"),
                "' is not supported (ByteLevel, GPT-2's)");
  BOOSTER_CHECK(!j["pre_tokenizer"].value("add_prefix_space", false), where, ": add_prefix_space = true is not supported");
  ByteLevelBPE t;
  const json& vocab = m.at("vocab");
  t.tokens_.assign(vocab.size(), "");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    BOOSTER_CHECK(id >= 0 && id < int64_t(vocab.size()) && t.tokens_[size_t(id)].empty(), where, ": vocab id ", id,
                  " of '", it.key(), "' is out of range or repeated");
    t.tokens_[size_t(id)] = it.key();
  }
  for (const json& mg : m.at("merges")) {
    if (mg.is_array()) {
      t.merges_.emplace_back(mg.at(0).get<std::string>(), mg.at(1).get<std::string>());
      continue;
    }
    const std::string s = mg.get<std::string>();
    const size_t sp = s.find(' ');
    BOOSTER_CHECK(sp != std::string::npos, where, ": merge '", s, "' is not two tokens");
    t.merges_.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  t.index();
  return t;
}

ByteLevelBPE ByteLevelBPE::from_tokenizer_json(const std::string& path) { return from_json_string(read_text_file(path), path); }

std::string ByteLevelBPE::to_json_string() const {
  json vocab = json::object(), merges = json::array();
  for (size_t i = 0; i < tokens_.size(); ++i) vocab[tokens_[i]] = int64_t(i);
  for (auto& [a, b] : merges_) merges.push_back(key(a, b));
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  return j.dump(2) + "\n";
}

void ByteLevelBPE::save(const std::string& path) const { write_file_atomic(path, to_json_string()); }

}  // namespace booster::data
