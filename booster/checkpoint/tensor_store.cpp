// Tensor store (see tensor_store.h).
#include "booster/checkpoint/tensor_store.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace booster::ckpt {

namespace fs = std::filesystem;

namespace {

struct PlannedRecord {
  size_t tensor;
  int64_t offset, numel;
};

// Packs tensors into shards of at most max_bytes, splitting tensors that do not fit.
std::vector<std::vector<PlannedRecord>> plan(const nn::StateDict& tensors, size_t max_bytes) {
  std::vector<std::vector<PlannedRecord>> shards(1);
  size_t used = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t].second;
    const size_t es = dtype_size(x.dtype());
    const int64_t n = x.numel();
    int64_t off = 0;
    do {
      if (used + es > max_bytes && used > 0) {
        shards.emplace_back();
        used = 0;
      }
      const int64_t fit = std::max<int64_t>(1, int64_t((max_bytes - used) / es));
      const int64_t take = std::min(fit, n - off);
      shards.back().push_back({t, off, take});
      used += size_t(take) * es;
      off += take;
    } while (off < n);
  }
  return shards;
}

std::string new_save_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%012llx%04x", (unsigned long long)(now & 0xffffffffffffull), unsigned(::getpid() & 0xffff));
  return buf;
}

proto::TensorRecord make_record(const std::string& name, const Tensor& contiguous, int64_t off, int64_t n) {
  proto::TensorRecord r;
  r.set_name(name);
  r.set_dtype(to_proto(contiguous.dtype()));
  for (int64_t d : contiguous.shape()) r.add_shape(d);
  r.set_offset(off);
  r.set_numel(n);
  const size_t es = dtype_size(contiguous.dtype());
  const char* base = static_cast<const char*>(contiguous.raw_data()) + size_t(off) * es;
  r.set_data(base, size_t(n) * es);
  r.set_checksum(checksum(base, size_t(n) * es));
  return r;
}

}  // namespace

std::string index_file_name(const std::string& prefix, const std::string& kind) { return prefix + kind + ".index"; }

void save_tensors(const std::string& path, const nn::StateDict& tensors, const SaveOptions& opts) {
  BOOSTER_CHECK(opts.max_shard_bytes > 0, "save: size_per_shard must be positive");
  const auto shards = plan(tensors, opts.max_shard_bytes);
  const std::string save_id = new_save_id();
  if (opts.shard) fs::create_directories(path);
  else if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());

  proto::Index index;
  index.set_format_version(kFormatVersion);
  index.set_kind(opts.kind);
  index.set_save_id(save_id);
  *index.mutable_layout() = opts.layout;
  if (opts.optimizer) *index.mutable_optimizer() = *opts.optimizer;
  std::vector<std::string> files;
  for (size_t s = 0; s < shards.size(); ++s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%s-%05zu.shard", save_id.c_str(), s + 1);
    files.push_back(opts.shard ? opts.prefix + opts.kind + buf : "");
    if (opts.shard) index.add_shard_files(files.back());
  }
  std::vector<proto::TensorEntry*> entries;
  for (auto& [name, t] : tensors) {
    auto* e = index.add_tensors();
    e->set_name(name);
    e->set_dtype(to_proto(t.dtype()));
    for (int64_t d : t.shape()) e->add_shape(d);
    entries.push_back(e);
  }
  // Checksums are filled while the data is serialized; the index is written after.
  auto fill_shard = [&](size_t s) {
    proto::Shard sh;
    sh.set_format_version(kFormatVersion);
    sh.set_save_id(save_id);
    for (const auto& pr : shards[s]) {
      const Tensor c = tensors[pr.tensor].second.detach().contiguous();
      *sh.add_records() = make_record(tensors[pr.tensor].first, c, pr.offset, pr.numel);
      auto* loc = entries[pr.tensor]->add_records();
      loc->set_file(files[s]);
      loc->set_offset(pr.offset);
      loc->set_numel(pr.numel);
      loc->set_checksum(sh.records(sh.records_size() - 1).checksum());
    }
    return sh;
  };
  if (!opts.shard) {
    // One file: the shards, one in memory at a time, then the index (which needs their
    // checksums) as the last message.
    ContainerWriter w(path);
    for (size_t s = 0; s < shards.size(); ++s) w.append(fill_shard(s));
    w.append(index);
    w.commit();
    return;
  }
  for (size_t s = 0; s < shards.size(); ++s) {  // one shard in memory at a time
    ContainerWriter w((fs::path(path) / files[s]).string());
    w.append(fill_shard(s));
    w.commit();
  }
  const std::string index_name = index_file_name(opts.prefix, opts.kind);
  write_message_file((fs::path(path) / index_name).string(), index);
  // Only now are the previous save's shards unreferenced. Shards and temp files of saves
  // that were killed midway go too (one writer owns a checkpoint folder at a time).
  const std::string stem = opts.prefix + opts.kind + "-";
  const std::set<std::string> keep(files.begin(), files.end());
  for (auto& e : fs::directory_iterator(path)) {
    const std::string f = e.path().filename().string(), target = temp_file_target(f);
    const std::string& name = target.empty() ? f : target;
    const bool shard = name.rfind(stem, 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".shard") == 0;
    if ((shard && !keep.count(f)) || (!target.empty() && name == index_name)) fs::remove(e.path());
  }
}

LoadedTensors load_tensors(const std::string& path, const std::string& kind, const std::string& prefix) {
  LoadedTensors out;
  const bool folder = fs::is_directory(path);
  BOOSTER_CHECK_T(IOError, folder || fs::exists(path), "checkpoint '", path, "' does not exist");
  std::unique_ptr<ContainerReader> single;
  int single_shards = 0;
  if (folder) {
    out.source = (fs::path(path) / index_file_name(prefix, kind)).string();
    BOOSTER_CHECK_T(IOError, fs::exists(out.source), "checkpoint folder '", path, "' has no ", index_file_name(prefix, kind),
                    " (not a ", kind, " checkpoint, or a save that never finished)");
    read_message_file(out.source, out.index, "index");
  } else {
    // The index is the last message: skip the shards to reach it, then come back.
    out.source = path;
    single = std::make_unique<ContainerReader>(path);
    int messages = 0;
    while (single->skip("message")) ++messages;
    BOOSTER_CHECK_T(IOError, messages > 0, "checkpoint '", path, "' is empty");
    single->rewind();
    for (int i = 0; i + 1 < messages; ++i) single->skip("shard");
    BOOSTER_CHECK_T(IOError, single->next(out.index, "index"), "checkpoint '", path, "' lost its index");
    single->rewind();
    single_shards = messages - 1;
  }
  const proto::Index& idx = out.index;
  BOOSTER_CHECK_T(IOError, idx.format_version() == kFormatVersion, out.source, ": format version ", idx.format_version(),
                  " (this build reads ", kFormatVersion, ")");
  BOOSTER_CHECK_T(IOError, idx.kind() == kind, out.source, ": holds a ", idx.kind(), " checkpoint, not a ", kind);

  // No tensor may claim more bytes than the checkpoint's files hold (a lying index must
  // not make us allocate terabytes).
  uint64_t available = 0;
  if (single) {
    available = fs::file_size(path);
  } else {
    for (auto& f : idx.shard_files()) {
      std::error_code ec;
      const auto sz = fs::file_size(fs::path(path) / f, ec);
      BOOSTER_CHECK_T(IOError, !ec, out.source, " lists shard '", f, "', which is missing");
      available += sz;
    }
  }
  uint64_t claimed = 0;
  for (auto& e : idx.tensors()) {
    uint64_t n = 1;
    for (int64_t d : e.shape()) {
      BOOSTER_CHECK_T(IOError, d >= 0 && d < (int64_t(1) << 40) && (d == 0 || n <= (uint64_t(1) << 50) / uint64_t(d)),
                      out.source, ": tensor '", e.name(), "' has an impossible shape");
      n *= uint64_t(d);
    }
    claimed += n * dtype_size(from_proto(e.dtype(), out.source + ": tensor '" + e.name() + "'"));
    BOOSTER_CHECK_T(IOError, claimed <= available, out.source, ": its tensors claim more bytes than its files hold (at '",
                    e.name(), "'): shards missing or truncated");
  }

  // Destination tensors, and which records each file must supply.
  std::map<std::string, std::vector<std::pair<size_t, const proto::RecordLocation*>>> wanted;
  std::vector<Tensor> dst;
  std::vector<std::string> names;
  for (int i = 0; i < idx.tensors_size(); ++i) {
    const auto& e = idx.tensors(i);
    const DType dt = from_proto(e.dtype(), out.source + ": tensor '" + e.name() + "'");
    Shape shape(e.shape().begin(), e.shape().end());
    for (int64_t d : shape) BOOSTER_CHECK_T(IOError, d >= 0, out.source, ": tensor '", e.name(), "' has a negative dim");
    dst.push_back(Tensor::empty(shape, dt));
    names.push_back(e.name());
    int64_t covered = 0;
    for (auto& loc : e.records()) {
      BOOSTER_CHECK_T(IOError, loc.offset() == covered && loc.numel() > 0, out.source, ": records of tensor '", e.name(),
                      "' do not cover it in order (record at ", loc.offset(), ", expected ", covered, ")");
      covered += loc.numel();
      wanted[loc.file()].emplace_back(size_t(i), &loc);
    }
    BOOSTER_CHECK_T(IOError, covered == shape_numel(shape), out.source, ": records of tensor '", e.name(), "' hold ",
                    covered, " of its ", shape_numel(shape), " elements");
  }
  auto consume = [&](const proto::Shard& sh, const std::string& file) {
    BOOSTER_CHECK_T(IOError, sh.save_id() == idx.save_id(), file, ": belongs to another save (", sh.save_id(),
                    ") than its index (", idx.save_id(), ")");
    std::map<std::pair<std::string, int64_t>, const proto::TensorRecord*> recs;
    for (auto& r : sh.records()) recs[{r.name(), r.offset()}] = &r;
    for (auto& [ti, loc] : wanted[single ? "" : fs::path(file).filename().string()]) {
      if (!loc) continue;  // already filled from an earlier shard
      const std::string& name = names[ti];
      auto it = recs.find({name, loc->offset()});
      if (it == recs.end()) {
        if (single) continue;  // a later shard of the single file may hold it
        BOOSTER_THROW(IOError, out.source, " lists tensor '", name, "' (elements from ", loc->offset(), ") in '", file,
                      "', which does not hold it");
      }
      const proto::TensorRecord& r = *it->second;
      Tensor& d = dst[ti];
      const DType rdt = from_proto(r.dtype(), file + ": tensor '" + name + "'");
      BOOSTER_CHECK_T(IOError, rdt == d.dtype(), file, ": tensor '", name, "' is ", dtype_name(rdt), " but its index says ",
                      dtype_name(d.dtype()));
      BOOSTER_CHECK_T(IOError, Shape(r.shape().begin(), r.shape().end()) == d.shape(), file, ": tensor '", name,
                      "' has shape ", shape_str(Shape(r.shape().begin(), r.shape().end())), " but its index says ",
                      shape_str(d.shape()));
      const size_t bytes = size_t(r.numel()) * dtype_size(rdt);
      BOOSTER_CHECK_T(IOError, r.numel() == loc->numel() && r.data().size() == bytes, file, ": tensor '", name,
                      "': record size does not match its index");
      BOOSTER_CHECK_T(IOError, r.checksum() == loc->checksum() && checksum(r.data().data(), bytes) == r.checksum(), file,
                      ": checksum mismatch in tensor '", name, "' (elements ", r.offset(), " to ", r.offset() + r.numel(),
                      "): the file is corrupt");
      std::memcpy(static_cast<char*>(d.raw_data()) + size_t(r.offset()) * dtype_size(rdt), r.data().data(), bytes);
      loc = nullptr;  // done
    }
  };
  if (single) {
    for (int i = 0; i < single_shards; ++i) {  // one shard in memory at a time
      proto::Shard sh;
      BOOSTER_CHECK_T(IOError, single->next(sh, "shard"), path, ": truncated before shard ", i + 1);
      consume(sh, path);
    }
  } else {
    for (auto& [file, list] : wanted) {
      const std::string full = (fs::path(path) / file).string();
      BOOSTER_CHECK_T(IOError, fs::exists(full), out.source, " lists shard '", file, "', which is missing");
      proto::Shard sh;
      read_message_file(full, sh, "shard");
      consume(sh, full);
    }
  }
  for (auto& [file, list] : wanted)
    for (auto& [ti, loc] : list)
      BOOSTER_CHECK_T(IOError, loc == nullptr, out.source, ": tensor '", names[ti], "' (elements from ", loc->offset(),
                      ") was not found in ", file.empty() ? path : file, " (truncated?)");
  for (size_t i = 0; i < dst.size(); ++i) out.tensors.emplace_back(names[i], dst[i]);
  return out;
}

}  // namespace booster::ckpt
