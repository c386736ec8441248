// The checkpoint container: magic "BSTCKPT1", then length-delimited protobuf messages.
// Writes go to a temp file that is fsynced and renamed into place (atomic); reads check
// the magic and every length, so a truncated or foreign file is a clear IOError.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdio>
#include <string>

#include "core/tensor/tensor.h"
#include "proto/checkpoint.pb.h"

namespace booster::ckpt {

/// Version 2: every record its own message, located by byte offset from the index, and a
/// record is a flat range or a box of its tensor. Version 1 (one Shard message holding all
/// of a shard's records, flat ranges only) is still read.
constexpr uint32_t kFormatVersion = 2;
/// Bytes of the magic that opens every container file.
constexpr uint64_t kMagicBytes = 8;

/// XXH3-64 of bytes.
uint64_t checksum(const void* data, size_t n);
proto::DType to_proto(DType t);
/// Converts back; IOError naming `where` for an unknown value.
DType from_proto(int t, const std::string& where);

/// The name of the temp file a ContainerWriter of this process writes `name` to before
/// commit(): ".<name>.tmp.<pid>", in the same folder.
std::string temp_file_name(const std::string& name);
/// The file name a writer's temp file stands for (of any process), or "" when `name` is
/// not such a temp file.
std::string temp_file_target(const std::string& name);

/// Appends messages to a new file; commit() makes it appear atomically.
class ContainerWriter {
 public:
  explicit ContainerWriter(std::string path);
  ~ContainerWriter();  // without commit(): the temp file is removed
  ContainerWriter(const ContainerWriter&) = delete;
  ContainerWriter& operator=(const ContainerWriter&) = delete;
  /// Appends a message; returns the byte offset of its length prefix in the file.
  uint64_t append(const google::protobuf::MessageLite& m);
  /// Appends a message followed by its Seal (the checksum of its bytes); returns the offset.
  uint64_t append_sealed(const google::protobuf::MessageLite& m);
  /// Appends the bytes of file `src` from byte `from` on, streaming (merging parts).
  void append_file(const std::string& src, uint64_t from);
  /// Bytes written so far (the magic included).
  uint64_t position() const { return pos_; }
  /// fsync, rename to the final path, fsync the folder.
  void commit();

 private:
  void write(const void* p, size_t n);
  /// Appends serialized bytes as one message.
  uint64_t append_bytes(const std::string& bytes, const std::string& type);
  std::string serialized(const google::protobuf::MessageLite& m) const;
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t pos_ = 0;
};

/// Reads the messages of a container in order.
class ContainerReader {
 public:
  explicit ContainerReader(std::string path);
  ~ContainerReader();
  ContainerReader(const ContainerReader&) = delete;
  ContainerReader& operator=(const ContainerReader&) = delete;
  /// Parses the next message into m; false at the clean end of the file.
  bool next(google::protobuf::MessageLite& m, const char* what);
  /// The next message's bytes; false at the clean end of the file.
  bool next_bytes(std::string& bytes, const char* what);
  /// Parses the next message into m and checks the Seal after it (a file written before
  /// seals ends after m instead); an IOError naming the file when they disagree.
  void next_sealed(google::protobuf::MessageLite& m, const char* what);
  /// Parses the file's last message into m, checking its Seal when it has one (an index at
  /// the end of an unsharded checkpoint); returns how many messages come before it.
  int last_sealed(google::protobuf::MessageLite& m, const char* what);
  /// Skips the next message without reading it; false at the clean end of the file.
  bool skip(const char* what);
  /// Goes back to the first message.
  void rewind();
  /// Moves to the message whose length prefix starts at byte `offset`.
  void seek(uint64_t offset);
  /// Byte offset of the next message's length prefix.
  uint64_t position() const;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  /// Reads the next length prefix; false at the clean end of the file.
  bool next_length(uint64_t& len, const char* what);
  /// Parses bytes into m, checked against the seal (when `seal` holds one).
  void parse_checked(const std::string& bytes, const std::string* seal, google::protobuf::MessageLite& m,
                     const char* what);
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;  // file size: no length may claim more than what is left
};

/// Writes one message, sealed, as a whole container file.
void write_message_file(const std::string& path, const google::protobuf::MessageLite& m);
/// Reads a container holding exactly one message of the given kind (and its Seal).
void read_message_file(const std::string& path, google::protobuf::MessageLite& m, const char* what);

}  // namespace booster::ckpt
