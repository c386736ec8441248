// Reading a checkpoint: the index is read and validated once (format version, kind, that
// every tensor's records tile it, that its files hold the bytes it claims); then each rank
// asks for the regions it needs, whatever layout wrote them, and only the records that
// overlap are read, each verified against its checksum. Format-1 checkpoints (one writer,
// whole tensors) are read too: their shards are parsed whole, as that format requires.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "booster/checkpoint/container.h"
#include "core/tensor/tensor.h"
#include "proto/checkpoint.pb.h"

namespace booster::ckpt {

class CheckpointReader {
 public:
  /// Opens the checkpoint at path (a folder with `<prefix><kind>.index`, or one file) and
  /// validates its index; IOError naming the file otherwise.
  CheckpointReader(const std::string& path, const std::string& kind, const std::string& prefix = "");
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const proto::Index& index() const { return index_; }
  /// The file the index came from.
  const std::string& source() const { return source_; }
  /// The index entry of tensor `name`, or null.
  const proto::TensorEntry* find(const std::string& name) const;
  /// The logical shape and dtype of an entry.
  static Shape shape_of(const proto::TensorEntry& e);
  DType dtype_of(const proto::TensorEntry& e) const;

  /// Fills `dst` (contiguous, region.local_shape(), any floating or matching dtype) with
  /// `region` of tensor `name`, reading only the records that overlap it.
  void read(const std::string& name, const Region& region, Tensor& dst);
  /// The whole tensor, in its stored dtype.
  Tensor read_whole(const std::string& name);
  /// Bytes of record data read so far (tests check that ranks read only what they need).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void validate();
  const proto::TensorRecord& record(const proto::TensorEntry& e, const proto::RecordLocation& loc);
  ContainerReader& file(const std::string& name);
  void load_v1(const std::string& path);

  std::string path_, source_;
  bool folder_ = false;
  int single_messages_ = 0;  // messages in a one-file checkpoint
  proto::Index index_;
  std::map<std::string, int> by_name_;
  std::map<std::string, std::unique_ptr<ContainerReader>> files_;  // format 2, opened on use
  proto::TensorRecord last_;                                      // the record read last
  std::map<std::string, Tensor> v1_;                              // format 1: whole tensors
  uint64_t bytes_read_ = 0;
};

}  // namespace booster::ckpt
