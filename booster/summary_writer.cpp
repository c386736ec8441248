// SummaryWriter (see summary_writer.h).
#include "booster/summary_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>

#include "core/common/check.h"
#include "proto/tensorboard.pb.h"

namespace booster {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

SummaryWriter::SummaryWriter(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(log_dir) /
           ("events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." + host))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  BOOSTER_CHECK_T(IOError, f_ != nullptr, "SummaryWriter: cannot create '", path_, "'");
  tb::Event e;
  e.set_wall_time(now_seconds());
  e.set_file_version("brain.Event:2");
  write_record(e.SerializeAsString());
  flush();
}

SummaryWriter::~SummaryWriter() {
  if (f_) std::fclose(f_);
}

void SummaryWriter::write_record(const std::string& data) {
  const uint64_t len = data.size();
  const uint32_t len_crc = masked_crc32c(&len, sizeof len), data_crc = masked_crc32c(data.data(), data.size());
  // Little-endian on every machine this runs on, as TFRecord is.
  const bool ok = std::fwrite(&len, sizeof len, 1, f_) == 1 && std::fwrite(&len_crc, sizeof len_crc, 1, f_) == 1 &&
                  std::fwrite(data.data(), 1, data.size(), f_) == data.size() &&
                  std::fwrite(&data_crc, sizeof data_crc, 1, f_) == 1;
  BOOSTER_CHECK_T(IOError, ok, "SummaryWriter: writing '", path_, "' failed");
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  tb::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(float(value));
  write_record(e.SerializeAsString());
}

void SummaryWriter::flush() { std::fflush(f_); }

}  // namespace booster
