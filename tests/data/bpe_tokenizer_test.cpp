// GPT-2's byte-level BPE: the ids of Hugging Face's own implementation (the JavaScript
// @huggingface/tokenizers, tools/make_bpe_golden.mjs) for a tokenizer.json ours trained, on
// texts of ASCII, Latin accents, CJK, emoji and ZWJ sequences, numbers, contractions and
// whitespace runs; training reproduces that file byte for byte; any UTF-8 decodes back
// exactly; invalid UTF-8, other tokenizer models and SentencePiece-style BPE named.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/common/file_util.h"
#include "core/tensor/random.h"
#include "data/bpe_tokenizer.h"
#include "tests/support/fixtures.h"

using namespace booster;
using booster::data::ByteLevelBPE;
using testkit::error_of;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = BOOSTER_BPE_GOLDEN;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  else if (cp < 0x10000) s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  else
    s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)), s += char(0x80 | ((cp >> 6) & 0x3F)),
        s += char(0x80 | (cp & 0x3F));
  return s;
}

}  // namespace

TEST(ByteLevelBPE, MatchesHuggingFacesImplementation) {
  const auto bpe = ByteLevelBPE::from_tokenizer_json((kGolden / "tokenizer.json").string());
  const auto cases = nlohmann::json::parse(read_text_file((kGolden / "cases.json").string()));
  ASSERT_EQ(cases["texts"].size(), cases["ids"].size());
  for (size_t i = 0; i < cases["texts"].size(); ++i) {
    const std::string text = cases["texts"][i];
    const auto want = cases["ids"][i].get<std::vector<int64_t>>();
    EXPECT_EQ(bpe.encode(text), want) << "text " << i << ": " << text;
    EXPECT_EQ(bpe.decode(want), text) << "text " << i;
  }
}

TEST(ByteLevelBPE, TrainingReproducesTheCommittedTokenizer) {
  std::string corpus = read_text_file(BOOSTER_SHARED_DIR "/data/tinyshakespeare/input.txt");
  corpus.resize(200000);
  const auto bpe = ByteLevelBPE::train(corpus, 512);
  EXPECT_EQ(bpe.vocab_size(), 512);
  EXPECT_EQ(bpe.to_json_string(), read_text_file((kGolden / "tokenizer.json").string()));
  // Merges shorten the text: fewer tokens than bytes on text like the corpus.
  const std::string sample = corpus.substr(1000, 5000);
  EXPECT_LT(double(bpe.encode(sample).size()), 0.6 * double(sample.size()));
  // The saved form loads back to the same tokenizer.
  const auto back = ByteLevelBPE::from_json_string(bpe.to_json_string());
  EXPECT_EQ(back.encode(sample), bpe.encode(sample));
}

TEST(ByteLevelBPE, AnyUtf8RoundTripsExactly) {
  const auto bpe = ByteLevelBPE::from_tokenizer_json((kGolden / "tokenizer.json").string());
  Generator g(5);
  for (int n = 0; n < 200; ++n) {
    std::string s;
    const int len = int(g.next_u64() % 40);
    for (int i = 0; i < len; ++i) {
      uint32_t cp = 0;
      switch (g.next_u64() % 4) {
        case 0: cp = uint32_t(g.next_u64() % 0x80); break;
        case 1: cp = 0x80 + uint32_t(g.next_u64() % 0x780); break;
        case 2: cp = 0x800 + uint32_t(g.next_u64() % 0xF800); break;
        default: cp = 0x10000 + uint32_t(g.next_u64() % 0x100000); break;
      }
      if (cp >= 0xD800 && cp < 0xE000) cp = 'x';  // surrogates are not characters
      s += utf8(cp);
    }
    ASSERT_EQ(bpe.decode(bpe.encode(s)), s) << "case " << n;
  }
  EXPECT_NE(error_of([&] { bpe.encode("ok \xff bad"); }).find("not valid UTF-8 at byte 3"), std::string::npos);
  EXPECT_NE(error_of([&] { bpe.decode({1, 512}); }).find("id 512 at position 1"), std::string::npos);
  // A character cut short (the first two bytes of 日, E6 97 A5) and a lone continuation byte
  // decode to U+FFFD each, the rest as it is.
  EXPECT_EQ(bpe.decode({0xE6, 0x97, 'a', 0xA5, 'b'}), "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD" "b");
}

TEST(ByteLevelBPE, OtherTokenizersAreNamed) {
  EXPECT_NE(error_of([] { ByteLevelBPE::from_json_string(R"({"model": {"type": "Unigram"}})", "t.json"); })
                .find("t.json: model type 'Unigram' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ByteLevelBPE::from_json_string(
                  R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []},
                      "pre_tokenizer": {"type": "Metaspace"}})");
            }).find("SentencePiece-style BPE"),
            std::string::npos);
  EXPECT_NE(error_of([] { ByteLevelBPE::from_json_string("[1, 2]", "x.json"); }).find("x.json: not a tokenizer.json"),
            std::string::npos);
  // Merges as pairs (newer tokenizers) read as merges as strings.
  const auto a = ByteLevelBPE::from_json_string(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
          "pre_tokenizer": {"type": "ByteLevel"}})");
  EXPECT_EQ(a.encode("ab"), (std::vector<int64_t>{2}));
  EXPECT_EQ(a.decode({2, 0}), "aba");
}
