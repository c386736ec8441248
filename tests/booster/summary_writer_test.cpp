// SummaryWriter: CRC32C against its published check value, and the TFRecord framing of what
// it writes (read back here; tools/read_tensorboard.py reads vit_train's in the example test).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "booster/summary_writer.h"
#include "proto/tensorboard.pb.h"

using namespace booster;
namespace fs = std::filesystem;

TEST(SummaryWriter, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value (RFC 3720)
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(SummaryWriter, RecordsAreFramedAndReadBack) {
  const fs::path dir = fs::temp_directory_path() / ("booster_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string path;
  {
    SummaryWriter w(dir.string());
    w.add_scalar("train/loss", 1.25, 3);
    w.add_scalar("val/accuracy", 0.5, 7);
    path = w.path();
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), {});
  size_t i = 0;
  std::vector<tb::Event> events;
  while (i < data.size()) {
    uint64_t len;
    uint32_t len_crc, data_crc;
    ASSERT_LE(i + 12, data.size());
    std::memcpy(&len, data.data() + i, 8);
    std::memcpy(&len_crc, data.data() + i + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(data.data() + i, 8));
    std::memcpy(&data_crc, data.data() + i + 12 + len, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data.data() + i + 12, len));
    tb::Event e;
    ASSERT_TRUE(e.ParseFromArray(data.data() + i + 12, int(len)));
    events.push_back(e);
    i += 12 + len + 4;
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 3);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 1.25f);
  EXPECT_EQ(events[2].summary().value(0).tag(), "val/accuracy");
  fs::remove_all(dir);
}
