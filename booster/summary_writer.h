// SummaryWriter (torch.utils.tensorboard's): scalars into a TensorBoard events file
// (<log_dir>/events.out.tfevents.<seconds>.<host>), TFRecord-framed Event messages
// (proto/tensorboard.proto) with masked CRC32C checksums. flush() (and the destructor)
// hands what was added to the file, so TensorBoard shows a run while it trains.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace booster {

class SummaryWriter {
 public:
  /// Creates log_dir and the events file (IOError naming it when it cannot).
  explicit SummaryWriter(const std::string& log_dir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// One scalar at a step (wall time: now); buffered until flush().
  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  /// The events file's path.
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* f_ = nullptr;
};

/// CRC32C (Castagnoli) of n bytes, and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace booster
