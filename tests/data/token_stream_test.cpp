// Token files (nanoGPT's headerless, llm.c's with its header) and their damaged forms, the
// windowed TokenStream, the character cache of tinyshakespeare, and batches of any keys:
// collate with padding, the errors naming the key, padding rows of token labels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/common/file_util.h"
#include "data/dataloader.h"
#include "data/token_stream.h"
#include "tests/support/fixtures.h"

using namespace booster;
using testkit::error_of;
using namespace booster::data;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = testkit::temp_path("tokens_" + name);
  fs::create_directories(d);
  return d;
}

std::vector<int64_t> iota_tokens(int64_t n, int64_t mult = 7, int64_t mod = 1000) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * mult) % mod);
  return t;
}


}  // namespace

TEST(TokenFile, NanoGPTAndLlmcFilesReadBack) {
  const auto d = temp_dir("formats");
  const auto tokens = iota_tokens(100, 613, 70000);
  write_nanogpt_tokens((d / "a.bin").string(), iota_tokens(100), 2);
  write_nanogpt_tokens((d / "b.bin").string(), tokens, 4);
  write_llmc_tokens((d / "c.bin").string(), tokens, 4);
  write_llmc_tokens((d / "d.bin").string(), iota_tokens(100), 2);
  TokenFile a((d / "a.bin").string()), b((d / "b.bin").string(), "uint32"), c((d / "c.bin").string()),
      e((d / "d.bin").string(), "uint32");  // the header says uint16 whatever data.dtype says
  EXPECT_STREQ(a.format(), "nanoGPT");
  EXPECT_STREQ(c.format(), "llm.c");
  EXPECT_EQ(e.width(), 2);
  for (const TokenFile* f : {&a, &b, &c, &e}) ASSERT_EQ(f->size(), 100);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(a[i], (i * 7) % 1000);
    EXPECT_EQ(b[i], tokens[size_t(i)]);
    EXPECT_EQ(c[i], tokens[size_t(i)]);
    EXPECT_EQ(e[i], (i * 7) % 1000);
  }
}

TEST(TokenFile, DamagedFilesAreRefusedByName) {
  const auto d = temp_dir("damaged");
  write_llmc_tokens((d / "c.bin").string(), iota_tokens(50), 2);
  std::string bytes = read_text_file((d / "c.bin").string());
  write_file_atomic((d / "short.bin").string(), bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(error_of([&] { TokenFile((d / "short.bin").string()); }).find("header counts 50 tokens"), std::string::npos);
  write_file_atomic((d / "head.bin").string(), bytes.substr(0, 100));
  EXPECT_NE(error_of([&] { TokenFile((d / "head.bin").string()); }).find("shorter than its 1024-byte header"),
            std::string::npos);
  std::string v3 = bytes;
  v3[4] = 3;
  write_file_atomic((d / "v3.bin").string(), v3);
  EXPECT_NE(error_of([&] { TokenFile((d / "v3.bin").string()); }).find("header version 3"), std::string::npos);
  write_file_atomic((d / "odd.bin").string(), std::string(7, 'x'));
  const std::string odd = error_of([&] { TokenFile((d / "odd.bin").string()); });
  EXPECT_NE(odd.find("odd.bin' is 7 bytes, not whole 16-bit tokens"), std::string::npos) << odd;
  EXPECT_NE(error_of([&] { TokenFile((d / "odd.bin").string(), "int8"); }).find("\"uint16\" or \"uint32\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { TokenFile((d / "none.bin").string()); }).find("cannot be opened"), std::string::npos);
}

TEST(TokenStream, ConsecutiveAndRandomWindows) {
  const auto d = temp_dir("windows");
  write_nanogpt_tokens((d / "t.bin").string(), iota_tokens(41, 1, 1000));
  TokenStreamOptions o;
  o.block_size = 8;
  o.random_windows = false;
  TokenStream seq((d / "t.bin").string(), o);
  EXPECT_EQ(seq.size(), 5u);  // (41 - 1) / 8
  Generator g(3);
  auto ex = seq.get(2, g);
  EXPECT_EQ(ex.at("input_ids").to_int_vector(), (std::vector<int64_t>{16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(ex.at("labels").to_int_vector(), (std::vector<int64_t>{17, 18, 19, 20, 21, 22, 23, 24}));
  o.random_windows = true;
  TokenStream rnd((d / "t.bin").string(), o);
  std::set<int64_t> starts;
  for (uint64_t s = 0; s < 200; ++s) {
    Generator a(s), b(s);
    auto x = rnd.get(0, a), y = rnd.get(0, b);
    EXPECT_EQ(x.at("input_ids").to_int_vector(), y.at("input_ids").to_int_vector());  // the generator decides
    const auto ids = x.at("input_ids").to_int_vector(), labels = x.at("labels").to_int_vector();
    starts.insert(ids[0]);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(labels[i], ids[i] + 1);
  }
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 41 - 8 - 1);  // nanoGPT's randint(len - block_size): every start, the last included
  o.block_size = 41;
  EXPECT_NE(error_of([&] { TokenStream((d / "t.bin").string(), o); }).find("holds 41 tokens"), std::string::npos);
}

// ids_dtype i32: the same windows in half the bytes, padded as i32 by a collate; a uint32
// file's token past 2^31 - 1 is refused by its position, and a float ids_dtype by name.
TEST(TokenStream, I32IdsHoldTheSameWindows) {
  const auto d = temp_dir("windows32");
  std::vector<int64_t> tokens = iota_tokens(41, 1, 1000);
  tokens[30] = int64_t(1) << 31;  // fits uint32, not i32
  write_nanogpt_tokens((d / "t.bin").string(), tokens, 4);
  TokenStreamOptions o;
  o.block_size = 8;
  o.random_windows = false;
  o.dtype = "uint32";
  TokenStream i64((d / "t.bin").string(), o);
  o.ids_dtype = DType::i32;
  TokenStream i32((d / "t.bin").string(), o);
  Generator g(3);
  const Example a = i64.get(1, g), b = i32.get(1, g);
  EXPECT_EQ(b.at("input_ids").dtype(), DType::i32);
  EXPECT_EQ(b.at("labels").dtype(), DType::i32);
  EXPECT_EQ(b.at("input_ids").to_int_vector(), a.at("input_ids").to_int_vector());
  EXPECT_EQ(b.at("labels").to_int_vector(), a.at("labels").to_int_vector());
  Batch padded = padding_collate({{"input_ids", 0}, {"labels", -100}})({b, Example{{"input_ids", b.at("input_ids").narrow(0, 0, 3)},
                                                                                   {"labels", b.at("labels").narrow(0, 0, 3)}}});
  EXPECT_EQ(padded.at("labels").dtype(), DType::i32);
  EXPECT_EQ(padded.at("labels").to_int_vector()[15], -100);
  EXPECT_NE(error_of([&] { i32.get(3, g); }).find("token 2147483648 at position 30 does not fit ids_dtype i32"),
            std::string::npos);
  o.ids_dtype = DType::f32;
  EXPECT_NE(error_of([&] { TokenStream((d / "t.bin").string(), o); }).find("ids_dtype must be i64 or i32, got f32"),
            std::string::npos);
}

TEST(TextCache, TinyShakespeareByCharactersOnceAcrossProcesses) {
  const auto d = temp_dir("shakespeare");
  const std::string text = BOOSTER_SHARED_DIR "/data/tinyshakespeare/input.txt";
  TextCache a, b;
  std::thread t1([&] { a = tokenize_text_cached(text, d.string()); });
  std::thread t2([&] { b = tokenize_text_cached(text, d.string()); });
  t1.join(), t2.join();
  EXPECT_EQ(a.vocab.chars.size(), 65u);  // nanoGPT's shakespeare_char vocabulary
  EXPECT_EQ(a.vocab.chars, b.vocab.chars);
  TokenFile train(a.train_bin), val(a.val_bin);
  EXPECT_EQ(train.size(), 1003854);  // nanoGPT's split: int(n * 0.9) train tokens
  EXPECT_EQ(val.size(), 1115394 - 1003854);
  std::vector<int64_t> first;
  for (int64_t i = 0; i < 14; ++i) first.push_back(train[i]);
  EXPECT_EQ(a.vocab.decode(first), "First Citizen:");
  const auto before = fs::last_write_time(a.train_bin);
  TextCache again = tokenize_text_cached(text, d.string());  // made once
  EXPECT_EQ(fs::last_write_time(again.train_bin), before);
  // Another text in the same folder makes it again.
  const auto other = d / "other.txt";
  std::ofstream(other) << "abcabc";
  TextCache small = tokenize_text_cached(other.string(), d.string(), 0.5);
  EXPECT_EQ(small.vocab.chars, "abc");
  EXPECT_EQ(TokenFile(small.train_bin).size(), 3);
  EXPECT_NE(error_of([&] { tokenize_text_cached(text, "/proc/booster_no_such_dir"); }).find("data.cache_dir"),
            std::string::npos);
}

TEST(Collate, AnyKeysStackedPaddedOrNamed) {
  auto ex = [](std::vector<int64_t> ids) {
    const auto n = int64_t(ids.size());
    return Example{{"input_ids", Tensor::from_ints(ids, {n})},
                   {"attention_mask", Tensor::ones({n})},
                   {"labels", Tensor::from_ints(ids, {n})}};
  };
  Collate pad = padding_collate({{"input_ids", 0}, {"attention_mask", 0}, {"labels", -100}});
  Batch b = pad({ex({5, 6, 7}), ex({8})});
  EXPECT_EQ(b.at("input_ids").shape(), (Shape{2, 3}));
  EXPECT_EQ(b.at("input_ids").to_int_vector(), (std::vector<int64_t>{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(b.at("labels").to_int_vector(), (std::vector<int64_t>{5, 6, 7, 8, -100, -100}));
  EXPECT_EQ(b.at("attention_mask").to_vector(), (std::vector<float>{1, 1, 1, 1, 0, 0}));
  const std::string shape = error_of([&] { default_collate({ex({5, 6, 7}), ex({8})}); });
  EXPECT_NE(shape.find("'attention_mask' of sample 1 has shape [1], sample 0's [3]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("padding_collate"), std::string::npos) << shape;
  Example wrong = ex({1, 2, 3});
  wrong["input_ids"] = Tensor::ones({3});
  const std::string dtype = error_of([&] { default_collate({ex({5, 6, 7}), wrong}); });
  EXPECT_NE(dtype.find("'input_ids' of sample 1 is f32, sample 0's is i64"), std::string::npos) << dtype;
  Example missing = ex({1, 2, 3});
  missing.erase("labels");
  missing["label"] = Tensor::from_ints({1}, {});
  const std::string key = error_of([&] { default_collate({ex({5, 6, 7}), missing}); });
  EXPECT_NE(key.find("sample 1 has no 'labels'"), std::string::npos) << key;
}

namespace {
class Windows : public Dataset {
 public:
  size_t size() const override { return 5; }
  Example get(size_t i, Generator&) const override {
    return {{"input_ids", Tensor::from_ints({int64_t(i), int64_t(i)}, {2})},
            {"labels", Tensor::from_ints({int64_t(i), int64_t(i)}, {2})}};
  }
};
}  // namespace

// A sampler's padding rows (a short replica's) carry the ignore label in every token.
TEST(Collate, PaddingRowsOfTokenLabelsAreIgnored) {
  DataLoaderOptions o;
  o.batch_size = 3;
  DataLoader dl(std::make_shared<Windows>(), o, std::make_shared<InferenceShardSampler>(5, 2, 1));
  auto b = dl.next();  // rank 1 of 2: samples 1, 3 and a padding row (its last, again)
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->at("labels").to_int_vector(), (std::vector<int64_t>{1, 1, 3, 3, kIgnoreLabel, kIgnoreLabel}));
  EXPECT_EQ(b->at("input_ids").to_int_vector(), (std::vector<int64_t>{1, 1, 3, 3, 3, 3}));
}
