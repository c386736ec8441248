// safetensors round trips and the malformed-file errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/common/file_util.h"
#include "nn/safetensors.h"

using namespace booster;
using namespace booster::nn;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("booster_st_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

StateDict sample() {
  return {{"a.weight", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3})},
          {"b.half", Tensor::from_vector({0.5f, -1.f}, {2}, DType::f16)},
          {"c.bf", Tensor::from_vector({3.f}, {1, 1}, DType::bf16)},
          {"d.ids", Tensor::from_ints({7, -8}, {2})}};
}

// Rewrites the JSON header of a file (keeping the data) to test lying headers.
void rewrite_header(const fs::path& p, const std::string& from, const std::string& to) {
  std::string bytes = read_text_file(p.string());
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  auto at = header.find(from);
  ASSERT_NE(at, std::string::npos) << header;
  header.replace(at, from.size(), to);
  const uint64_t m = header.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += header + bytes.substr(8 + n);
  std::ofstream(p, std::ios::binary) << out;
}

void expect_io_error(const fs::path& p, const std::vector<std::string>& parts) {
  try {
    load_safetensors(p.string());
    FAIL() << "no error for " << p;
  } catch (const IOError& e) {
    for (auto& s : parts) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  auto dir = temp_dir("rt");
  StateDict all = sample();
  all.emplace_back("e.ids32", Tensor::from_ints({int64_t(1) << 30, -3}, {2}).to(DType::i32));
  save_safetensors((dir / "x.safetensors").string(), all, {{"format", "pt"}, {"note", "hi"}});
  SafetensorsFile f = load_safetensors((dir / "x.safetensors").string());
  EXPECT_EQ(f.metadata.at("note"), "hi");
  ASSERT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.at("a.weight").shape(), (Shape{2, 3}));
  EXPECT_EQ(f.at("a.weight").to_vector()[5], 6.f);
  EXPECT_EQ(f.at("b.half").dtype(), DType::f16);
  EXPECT_EQ(f.at("b.half").to_vector()[1], -1.f);
  EXPECT_EQ(f.at("c.bf").dtype(), DType::bf16);
  EXPECT_EQ(f.at("d.ids").to_int_vector(), (std::vector<int64_t>{7, -8}));
  EXPECT_EQ(f.at("e.ids32").dtype(), DType::i32);
  EXPECT_EQ(f.at("e.ids32").to_int_vector(), (std::vector<int64_t>{int64_t(1) << 30, -3}));
}

TEST(Safetensors, ShardedDirectoryRoundTrip) {
  auto dir = temp_dir("shard");
  StateDict sd;
  for (int i = 0; i < 5; ++i) sd.emplace_back("t" + std::to_string(i), Tensor::full({100}, i));
  save_safetensors_dir(dir.string(), sd, 900);  // 400 bytes each: 2 per shard
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  StateDict back = load_safetensors_dir(dir.string());
  ASSERT_EQ(back.size(), 5u);
  for (auto& [n, t] : back) EXPECT_EQ(t.to_vector()[0], float(n[1] - '0')) << n;
  // An index that names a tensor its shard lacks.
  rewrite_header(dir / "model-00001-of-00003.safetensors", "\"t0\"", "\"zz\"");
  try {
    load_safetensors_dir(dir.string());
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("'t0'"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, MalformedFilesNameFileAndTensor) {
  auto dir = temp_dir("bad");
  const fs::path p = dir / "m.safetensors";
  save_safetensors(p.string(), sample());
  const std::string good = read_text_file(p.string());

  std::ofstream(p, std::ios::binary) << good.substr(0, good.size() - 4);  // truncated data
  expect_io_error(p, {p.string(), "d.ids", "truncated"});
  std::ofstream(p, std::ios::binary) << good.substr(0, 5);  // truncated before the header
  expect_io_error(p, {"truncated"});
  std::ofstream(p, std::ios::binary) << good.substr(0, 40);  // header cut
  expect_io_error(p, {"exceeds the file"});

  std::ofstream(p, std::ios::binary) << good;
  rewrite_header(p, "\"F16\"", "\"F64\"");
  expect_io_error(p, {"b.half", "unsupported dtype 'F64'"});

  std::ofstream(p, std::ios::binary) << good;
  rewrite_header(p, "[2,3]", "[3,3]");  // shape says 36 bytes, offsets hold 24
  expect_io_error(p, {"a.weight", "needs 36"});

  std::ofstream(p, std::ios::binary) << good;
  rewrite_header(p, "\"data_offsets\":[0,24]", "\"data_offsets\":[4,28]");  // overlaps the next tensor
  expect_io_error(p, {"overlap"});

  std::ofstream(p, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0not json at all!", 24);
  expect_io_error(p, {"not valid JSON"});
  EXPECT_THROW(load_safetensors((dir / "nope.safetensors").string()), IOError);
}
