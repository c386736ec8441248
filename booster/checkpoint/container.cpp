// Container reading and writing (see container.h).
#include "booster/checkpoint/container.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>
#include <string_view>

namespace booster::ckpt {

namespace {
constexpr char kMagic[8] = {'B', 'S', 'T', 'C', 'K', 'P', 'T', '1'};
constexpr uint64_t kMaxMessage = uint64_t(1) << 31;  // protobuf's parse limit
constexpr char kSealMarker[] = "booster.seal";

// Whether bytes are a Seal (another message never parses with the marker set); its checksum.
bool as_seal(const std::string& bytes, uint64_t& sum) {
  proto::Seal seal;
  if (!seal.ParseFromString(bytes) || seal.marker() != kSealMarker) return false;
  sum = seal.checksum();
  return true;
}
}  // namespace

uint64_t checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

proto::DType to_proto(DType t) {
  switch (t) {
    case DType::f32: return proto::F32;
    case DType::bf16: return proto::BF16;
    case DType::f16: return proto::F16;
    case DType::i64: return proto::I64;
    case DType::u8: return proto::U8;
    case DType::i32: return proto::I32;
  }
  return proto::F32;
}

DType from_proto(int t, const std::string& where) {
  switch (t) {
    case proto::F32: return DType::f32;
    case proto::BF16: return DType::bf16;
    case proto::F16: return DType::f16;
    case proto::I64: return DType::i64;
    case proto::U8: return DType::u8;
    case proto::I32: return DType::i32;
    default: break;
  }
  BOOSTER_THROW(IOError, where, ": unknown dtype code ", t);
}

namespace {
constexpr std::string_view kTempTag = ".tmp.";
}

std::string temp_file_name(const std::string& name) {
  return std::string(".").append(name).append(kTempTag).append(std::to_string(::getpid()));
}

std::string temp_file_target(const std::string& name) {
  const size_t at = name.rfind(kTempTag);
  const size_t pid = at + kTempTag.size();
  if (name.empty() || name[0] != '.' || at == std::string::npos || at < 2 || pid == name.size() ||
      name.find_first_not_of("0123456789", pid) != std::string::npos)
    return "";
  return name.substr(1, at - 1);
}

ContainerWriter::ContainerWriter(std::string path) : path_(std::move(path)) {
  const auto p = std::filesystem::path(path_);
  tmp_ = (p.parent_path() / temp_file_name(p.filename().string())).string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BOOSTER_CHECK_T(IOError, fd_ >= 0, "checkpoint: cannot create '", tmp_, "': ", std::strerror(errno));
  write(kMagic, sizeof kMagic);
}

ContainerWriter::~ContainerWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void ContainerWriter::write(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    BOOSTER_CHECK_T(IOError, w > 0, "checkpoint: writing '", tmp_, "' failed: ", std::strerror(errno));
    c += w;
    n -= size_t(w);
    pos_ += uint64_t(w);
  }
}

void ContainerWriter::append_file(const std::string& src, uint64_t from) {
  std::FILE* f = std::fopen(src.c_str(), "rb");
  BOOSTER_CHECK_T(IOError, f != nullptr, "checkpoint: cannot open '", src, "': ", std::strerror(errno));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  BOOSTER_CHECK_T(IOError, std::fseek(f, long(from), SEEK_SET) == 0, "checkpoint: cannot seek in '", src, "'");
  std::vector<char> buf(size_t(4) << 20);
  for (;;) {
    const size_t got = std::fread(buf.data(), 1, buf.size(), f);
    if (got > 0) write(buf.data(), got);
    if (got < buf.size()) {
      BOOSTER_CHECK_T(IOError, !std::ferror(f), "checkpoint: reading '", src, "' failed");
      return;
    }
  }
}

std::string ContainerWriter::serialized(const google::protobuf::MessageLite& m) const {
  std::string bytes;
  BOOSTER_CHECK_T(IOError, m.SerializeToString(&bytes), "checkpoint: cannot serialize a ", m.GetTypeName(), " for '",
                  path_, "'");
  return bytes;
}

uint64_t ContainerWriter::append(const google::protobuf::MessageLite& m) {
  return append_bytes(serialized(m), m.GetTypeName());
}

uint64_t ContainerWriter::append_sealed(const google::protobuf::MessageLite& m) {
  const std::string bytes = serialized(m);
  const uint64_t at = append_bytes(bytes, m.GetTypeName());
  proto::Seal seal;
  seal.set_marker(kSealMarker);
  seal.set_checksum(checksum(bytes.data(), bytes.size()));
  append(seal);
  return at;
}

uint64_t ContainerWriter::append_bytes(const std::string& bytes, const std::string& type) {
  const uint64_t at = pos_;
  BOOSTER_CHECK_T(IOError, bytes.size() < kMaxMessage, "checkpoint: a ", type, " of ", bytes.size(),
                  " bytes exceeds the 2 GB message limit; lower size_per_shard");
  uint64_t v = bytes.size();
  unsigned char len[10];
  size_t k = 0;
  do {
    len[k++] = uint8_t((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  write(len, k);
  write(bytes.data(), bytes.size());
  return at;
}

void ContainerWriter::commit() {
  BOOSTER_CHECK_T(IOError, ::fsync(fd_) == 0, "checkpoint: fsync of '", tmp_, "' failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    BOOSTER_THROW(IOError, "checkpoint: cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err));
  }
  const auto dir = std::filesystem::path(path_).parent_path();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

ContainerReader::ContainerReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  BOOSTER_CHECK_T(IOError, f_ != nullptr, "checkpoint: cannot open '", path_, "': ", std::strerror(errno));
  std::error_code ec;
  size_ = std::filesystem::file_size(path_, ec);
  char magic[8] = {};
  const size_t got = std::fread(magic, 1, 8, f_);
  BOOSTER_CHECK_T(IOError, got == 8 && std::memcmp(magic, kMagic, 8) == 0, "checkpoint: '", path_,
                  "' is not a booster-cpp checkpoint file (bad magic)");
}

ContainerReader::~ContainerReader() {
  if (f_) std::fclose(f_);
}

bool ContainerReader::next_length(uint64_t& len, const char* what) {
  len = 0;
  int shift = 0;
  for (int i = 0;; ++i) {
    const int c = std::fgetc(f_);
    if (c == EOF) {
      BOOSTER_CHECK_T(IOError, i == 0, "checkpoint: '", path_, "' is truncated (inside a length prefix)");
      return false;
    }
    len |= uint64_t(c & 0x7f) << shift;
    shift += 7;
    if (!(c & 0x80)) break;
    BOOSTER_CHECK_T(IOError, shift < 64, "checkpoint: '", path_, "' is corrupt (bad length prefix)");
  }
  BOOSTER_CHECK_T(IOError, len < kMaxMessage, "checkpoint: '", path_, "' is corrupt (a ", what, " claims ", len,
                  " bytes)");
  const long pos = std::ftell(f_);
  BOOSTER_CHECK_T(IOError, pos >= 0 && len <= size_ - uint64_t(pos), "checkpoint: '", path_, "' is truncated: a ", what,
                  " needs ", len, " bytes, ", size_ - uint64_t(std::max(pos, 0L)), " remain");
  return true;
}

bool ContainerReader::next_bytes(std::string& bytes, const char* what) {
  uint64_t len;
  if (!next_length(len, what)) return false;
  bytes.assign(len, '\0');
  const size_t got = std::fread(bytes.data(), 1, len, f_);
  BOOSTER_CHECK_T(IOError, got == len, "checkpoint: '", path_, "' is truncated: a ", what, " needs ", len,
                  " bytes, the file holds ", got);
  return true;
}

bool ContainerReader::next(google::protobuf::MessageLite& m, const char* what) {
  std::string bytes;
  if (!next_bytes(bytes, what)) return false;
  parse_checked(bytes, nullptr, m, what);
  return true;
}

void ContainerReader::parse_checked(const std::string& bytes, const std::string* seal,
                                    google::protobuf::MessageLite& m, const char* what) {
  if (seal) {
    uint64_t sum = 0;
    BOOSTER_CHECK_T(IOError, as_seal(*seal, sum), "checkpoint: '", path_, "' is corrupt: its ", what,
                    " is followed by something other than its seal");
    BOOSTER_CHECK_T(IOError, sum == checksum(bytes.data(), bytes.size()), "checkpoint: '", path_,
                    "' is corrupt: checksum mismatch in its ", what);
  }
  BOOSTER_CHECK_T(IOError, m.ParseFromString(bytes), "checkpoint: '", path_, "' holds a corrupt ", what);
}

void ContainerReader::next_sealed(google::protobuf::MessageLite& m, const char* what) {
  std::string bytes, seal;
  BOOSTER_CHECK_T(IOError, next_bytes(bytes, what), "checkpoint: '", path_, "' holds no ", what);
  const bool sealed = next_bytes(seal, "seal");  // a file written before seals ends here
  parse_checked(bytes, sealed ? &seal : nullptr, m, what);
  BOOSTER_CHECK_T(IOError, !sealed || !skip("message"), "checkpoint: '", path_, "' holds more than one ", what);
}

int ContainerReader::last_sealed(google::protobuf::MessageLite& m, const char* what) {
  rewind();
  int messages = 0;
  while (skip("message")) ++messages;
  BOOSTER_CHECK_T(IOError, messages > 0, "checkpoint: '", path_, "' is empty");
  rewind();
  for (int i = 0; i + 1 < messages; ++i) skip("message");
  std::string last, body;
  next_bytes(last, what);
  uint64_t sum = 0;
  if (messages < 2 || !as_seal(last, sum)) {  // written before seals
    parse_checked(last, nullptr, m, what);
    return messages - 1;
  }
  rewind();
  for (int i = 0; i + 2 < messages; ++i) skip("message");
  next_bytes(body, what);
  parse_checked(body, &last, m, what);
  return messages - 2;
}

bool ContainerReader::skip(const char* what) {
  uint64_t len;
  if (!next_length(len, what)) return false;
  BOOSTER_CHECK_T(IOError, std::fseek(f_, long(len), SEEK_CUR) == 0, "checkpoint: cannot seek in '", path_, "'");
  return true;
}

void ContainerReader::rewind() { std::fseek(f_, long(kMagicBytes), SEEK_SET); }

void ContainerReader::seek(uint64_t offset) {
  BOOSTER_CHECK_T(IOError, offset >= kMagicBytes && offset < size_, "checkpoint: '", path_, "' has no message at byte ",
                  offset, " (the file holds ", size_, " bytes): truncated, or not the file its index names");
  BOOSTER_CHECK_T(IOError, std::fseek(f_, long(offset), SEEK_SET) == 0, "checkpoint: cannot seek in '", path_, "'");
}

uint64_t ContainerReader::position() const { return uint64_t(std::ftell(f_)); }

void write_message_file(const std::string& path, const google::protobuf::MessageLite& m) {
  ContainerWriter w(path);
  w.append_sealed(m);
  w.commit();
}

void read_message_file(const std::string& path, google::protobuf::MessageLite& m, const char* what) {
  ContainerReader r(path);
  r.next_sealed(m, what);
}

}  // namespace booster::ckpt
