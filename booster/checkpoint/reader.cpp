// The checkpoint reader (see reader.h).
#include "booster/checkpoint/reader.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "booster/checkpoint/records.h"
#include "booster/checkpoint/writer.h"

namespace booster::ckpt {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(const std::string& path, const std::string& kind, const std::string& prefix)
    : path_(path) {
  folder_ = fs::is_directory(path);
  BOOSTER_CHECK_T(IOError, folder_ || fs::exists(path), "checkpoint '", path, "' does not exist");
  if (folder_) {
    source_ = (fs::path(path) / index_file_name(prefix, kind)).string();
    BOOSTER_CHECK_T(IOError, fs::exists(source_), "checkpoint folder '", path, "' has no ", index_file_name(prefix, kind),
                    " (not a ", kind, " checkpoint, or a save that never finished)");
    read_message_file(source_, index_, "index");
  } else {
    // The index is the last message (before its seal).
    source_ = path;
    ContainerReader r(path);
    single_messages_ = r.last_sealed(index_, "index") + 1;
  }
  BOOSTER_CHECK_T(IOError, index_.format_version() == 1 || index_.format_version() == kFormatVersion, source_,
                  ": format version ", index_.format_version(), " (this build reads 1 and ", kFormatVersion, ")");
  BOOSTER_CHECK_T(IOError, index_.kind() == kind, source_, ": holds a ", index_.kind(), " checkpoint, not a ", kind);
  for (int i = 0; i < index_.tensors_size(); ++i) {
    BOOSTER_CHECK_T(IOError, by_name_.emplace(index_.tensors(i).name(), i).second, source_, ": tensor '",
                    index_.tensors(i).name(), "' is listed twice");
  }
  validate();
  if (index_.format_version() == 1) load_v1(path);
}

CheckpointReader::~CheckpointReader() = default;

const proto::TensorEntry* CheckpointReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &index_.tensors(it->second);
}

Shape CheckpointReader::shape_of(const proto::TensorEntry& e) { return Shape(e.shape().begin(), e.shape().end()); }

DType CheckpointReader::dtype_of(const proto::TensorEntry& e) const {
  return from_proto(e.dtype(), source_ + ": tensor '" + e.name() + "'");
}

void CheckpointReader::validate() {
  // No tensor may claim more bytes than the checkpoint's files hold (a lying index must
  // not make us allocate terabytes), and each tensor's records must tile it.
  uint64_t available = 0;
  std::map<std::string, uint64_t> file_bytes;  // shard file -> its size
  if (!folder_) {
    available = fs::file_size(path_);
  } else {
    for (auto& f : index_.shard_files()) {
      std::error_code ec;
      const auto sz = fs::file_size(fs::path(path_) / f, ec);
      BOOSTER_CHECK_T(IOError, !ec, source_, " lists shard '", f, "', which is missing");
      available += sz;
      file_bytes[f] = sz;
    }
  }
  // Format 2 locates every record: one that ends past its file's end names both.
  auto check_record_fits = [&](const proto::TensorEntry& e, const proto::RecordLocation& loc) {
    if (index_.format_version() < 2) return;
    auto it = file_bytes.find(loc.file());
    const uint64_t size = folder_ ? (it == file_bytes.end() ? 0 : it->second) : available;
    const std::string file = folder_ ? (fs::path(path_) / loc.file()).string() : path_;
    const uint64_t end = loc.byte_offset() + uint64_t(loc.numel()) * dtype_size(dtype_of(e));
    BOOSTER_CHECK_T(IOError, end <= size, file, ": truncated: it holds ", size, " bytes, its record of tensor '",
                    e.name(), "' (elements ", loc.offset(), " to ", loc.offset() + loc.numel(), ") needs ", end);
  };
  uint64_t claimed = 0;
  for (auto& e : index_.tensors()) {
    uint64_t n = 1;
    for (int64_t d : e.shape()) {
      BOOSTER_CHECK_T(IOError, d >= 0 && d < (int64_t(1) << 40) && (d == 0 || n <= (uint64_t(1) << 50) / uint64_t(d)),
                      source_, ": tensor '", e.name(), "' has an impossible shape");
      n *= uint64_t(d);
    }
    claimed += n * dtype_size(dtype_of(e));
    for (auto& loc : e.records()) check_record_fits(e, loc);
    BOOSTER_CHECK_T(IOError, claimed <= available, source_, ": its tensors claim more bytes than its files hold (at '",
                    e.name(), "'): shards missing or truncated");
    const Shape full = shape_of(e);
    std::vector<Region> regions;
    for (auto& loc : e.records()) {
      BOOSTER_CHECK_T(IOError, loc.numel() > 0, source_, ": tensor '", e.name(), "' has an empty record");
      regions.push_back(region_of(loc, full, source_ + ": tensor '" + e.name() + "'"));
    }
    check_tiling<IOError>(e.name(), full, regions, source_);
  }
}

ContainerReader& CheckpointReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return *it->second;
  const std::string full = folder_ ? (fs::path(path_) / name).string() : path_;
  BOOSTER_CHECK_T(IOError, fs::exists(full), source_, " lists shard '", name, "', which is missing");
  auto r = std::make_unique<ContainerReader>(full);
  proto::Shard header;
  BOOSTER_CHECK_T(IOError, r->next(header, "shard header"), full, ": holds no shard header");
  BOOSTER_CHECK_T(IOError, header.save_id() == index_.save_id(), full, ": belongs to another save (", header.save_id(),
                  ") than its index (", index_.save_id(), ")");
  return *files_.emplace(name, std::move(r)).first->second;
}

const proto::TensorRecord& CheckpointReader::record(const proto::TensorEntry& e, const proto::RecordLocation& loc) {
  ContainerReader& f = file(loc.file());
  const Shape full = shape_of(e);
  const Region want = region_of(loc, full, source_);
  const std::string where = source_ + " lists tensor '" + e.name() + "' (" + want.str() + ") at byte " +
                            std::to_string(loc.byte_offset()) + " of '" + f.path() + "'";
  try {
    f.seek(loc.byte_offset());
    BOOSTER_CHECK_T(IOError, f.next(last_, "record"), "the file ends there");
  } catch (const IOError& ex) {
    BOOSTER_THROW(IOError, where, ", which does not hold it: ", ex.what());
  }
  BOOSTER_CHECK_T(IOError, last_.name() == e.name() && region_of(last_, f.path()) == want, where,
                  ", which does not hold it (it holds '", last_.name(), "')");
  const DType rdt = from_proto(last_.dtype(), f.path() + ": tensor '" + e.name() + "'");
  BOOSTER_CHECK_T(IOError, rdt == dtype_of(e), f.path(), ": tensor '", e.name(), "' is ", dtype_name(rdt),
                  " but its index says ", dtype_name(dtype_of(e)));
  const Shape rs(last_.shape().begin(), last_.shape().end());
  BOOSTER_CHECK_T(IOError, rs == full, f.path(), ": tensor '", e.name(), "' has shape ", shape_str(rs),
                  " but its index says ", shape_str(full));
  const size_t bytes = size_t(want.numel()) * dtype_size(rdt);
  BOOSTER_CHECK_T(IOError, last_.data().size() == bytes, f.path(), ": tensor '", e.name(),
                  "': record size does not match its index");
  BOOSTER_CHECK_T(IOError, last_.checksum() == loc.checksum() && checksum(last_.data().data(), bytes) == last_.checksum(),
                  f.path(), ": checksum mismatch in tensor '", e.name(), "' (", want.str(), "): the file is corrupt");
  bytes_read_ += bytes;
  return last_;
}

void CheckpointReader::read(const std::string& name, const Region& region, Tensor& dst) {
  const proto::TensorEntry* e = find(name);
  BOOSTER_CHECK_T(IOError, e != nullptr, source_, ": has no tensor '", name, "'");
  const Shape full = shape_of(*e);
  BOOSTER_CHECK_T(ShapeError, region.full == full, source_, ": tensor '", name, "' is ", shape_str(full),
                  ", asked for ", region.str());
  BOOSTER_CHECK_T(ShapeError, dst.defined() && dst.is_contiguous() && dst.numel() == region.numel(), "read of '", name,
                  "': the destination ", dst.defined() ? dst.describe() : "undefined",
                  " must be contiguous and hold ", region.str());
  if (index_.format_version() == 1) {
    const Tensor& whole = v1_.at(name);
    copy_shared(dst, region, whole.raw_data(), whole.dtype(), Region::whole(full));
    return;
  }
  const auto want = region.runs();
  int64_t got = 0;
  for (auto& loc : e->records()) {
    const Region lr = region_of(loc, full, source_);
    if (for_each_overlap(want, lr.runs(), [](int64_t, int64_t, int64_t) {}) == 0) continue;
    const proto::TensorRecord& rec = record(*e, loc);
    got += copy_shared(dst, region, rec.data().data(), dtype_of(*e), lr);
  }
  BOOSTER_CHECK_T(IOError, got == region.numel(), source_, ": the records of '", name, "' cover ", got, " of the ",
                  region.numel(), " elements of ", region.str());
}

Tensor CheckpointReader::read_whole(const std::string& name) {
  const proto::TensorEntry* e = find(name);
  BOOSTER_CHECK_T(IOError, e != nullptr, source_, ": has no tensor '", name, "'");
  Tensor t = Tensor::empty(shape_of(*e), dtype_of(*e));
  read(name, Region::whole(t.shape()), t);
  return t;
}

// Format 1: shards are single messages holding many flat records; read them all once.
void CheckpointReader::load_v1(const std::string& path) {
  std::map<std::string, std::vector<std::pair<std::string, const proto::RecordLocation*>>> wanted;  // file -> records
  for (auto& e : index_.tensors()) {
    v1_[e.name()] = Tensor::empty(shape_of(e), dtype_of(e));
    for (auto& loc : e.records()) wanted[loc.file()].emplace_back(e.name(), &loc);
  }
  std::map<std::pair<std::string, int64_t>, bool> filled;
  auto consume = [&](const proto::Shard& sh, const std::string& file) {
    BOOSTER_CHECK_T(IOError, sh.save_id() == index_.save_id(), file, ": belongs to another save (", sh.save_id(),
                    ") than its index (", index_.save_id(), ")");
    for (auto& r : sh.records()) {
      const proto::TensorEntry* e = find(r.name());
      if (!e) continue;
      const proto::RecordLocation* loc = nullptr;
      for (auto& l : e->records())
        if (l.offset() == r.offset() && (folder_ ? fs::path(file).filename().string() == l.file() : true)) loc = &l;
      if (!loc || filled[{r.name(), r.offset()}]) continue;
      const DType rdt = from_proto(r.dtype(), file + ": tensor '" + r.name() + "'");
      BOOSTER_CHECK_T(IOError, rdt == dtype_of(*e), file, ": tensor '", r.name(), "' is ", dtype_name(rdt),
                      " but its index says ", dtype_name(dtype_of(*e)));
      const size_t bytes = size_t(r.numel()) * dtype_size(rdt);
      BOOSTER_CHECK_T(IOError, r.numel() == loc->numel() && r.data().size() == bytes, file, ": tensor '", r.name(),
                      "': record size does not match its index");
      BOOSTER_CHECK_T(IOError, r.checksum() == loc->checksum() && checksum(r.data().data(), bytes) == r.checksum(), file,
                      ": checksum mismatch in tensor '", r.name(), "' (elements ", r.offset(), " to ",
                      r.offset() + r.numel(), "): the file is corrupt");
      std::memcpy(static_cast<char*>(v1_[r.name()].raw_data()) + size_t(r.offset()) * dtype_size(rdt), r.data().data(),
                  bytes);
      filled[{r.name(), r.offset()}] = true;
    }
  };
  if (!folder_) {
    ContainerReader r(path);
    for (int i = 0; i + 1 < single_messages_; ++i) {  // the shards, one in memory at a time; the index is last
      proto::Shard sh;
      BOOSTER_CHECK_T(IOError, r.next(sh, "shard"), path, ": truncated before shard ", i + 1);
      consume(sh, path);
    }
  } else {
    for (auto& [file, list] : wanted) {
      const std::string full = (fs::path(path) / file).string();
      BOOSTER_CHECK_T(IOError, fs::exists(full), source_, " lists shard '", file, "', which is missing");
      proto::Shard sh;
      read_message_file(full, sh, "shard");
      consume(sh, full);
    }
  }
  for (auto& [file, list] : wanted)
    for (auto& [name, loc] : list)
      BOOSTER_CHECK_T(IOError, filled[std::make_pair(name, loc->offset())], source_, ": tensor '", name, "' (elements from ",
                      loc->offset(), ") was not found in ", file.empty() ? path : file, " (truncated?)");
}

}  // namespace booster::ckpt
