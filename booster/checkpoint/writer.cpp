// The distributed checkpoint writer (see writer.h).
#include "booster/checkpoint/writer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <set>

#include <spdlog/spdlog.h>

#include "booster/checkpoint/container.h"
#include "booster/checkpoint/records.h"
#include "booster/checkpoint/world.h"

namespace booster::ckpt {

namespace fs = std::filesystem;

namespace {

std::string new_save_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%012llx%04x", (unsigned long long)(now & 0xffffffffffffull), unsigned(::getpid() & 0xffff));
  return buf;
}

// One distinct piece of a tensor and who holds it.
struct Piece {
  std::string name;
  Region region;
  DType dtype;
  std::vector<int> holders;
  int writer = -1;
  size_t bytes() const { return size_t(region.numel()) * dtype_size(dtype); }
};

// What every rank holds, as an Index message of descriptors (one location per tensor).
std::string describe(const ShardedState& mine) {
  proto::Index d;
  for (auto& st : mine) {
    BOOSTER_CHECK_T(ShapeError, st.source || (st.tensor.defined() && st.tensor.numel() == st.region.numel()),
                    "save: tensor '", st.name, "' holds ", st.tensor.defined() ? st.tensor.numel() : 0,
                    " elements for ", st.region.str());
    auto* e = d.add_tensors();
    e->set_name(st.name);
    e->set_dtype(to_proto(st.dtype()));
    for (int64_t v : st.region.full) e->add_shape(v);
    set_region(*e->add_records(), st.region);
  }
  return d.SerializeAsString();
}

// The pieces of every tensor, checked and assigned to writers, identically on every rank.
std::vector<Piece> plan(const std::vector<std::string>& descriptors, std::vector<std::string>& order) {
  std::map<std::string, std::pair<Shape, DType>> meta;
  std::map<std::string, int> first_rank;
  std::vector<Piece> pieces;
  std::map<std::pair<std::string, std::string>, size_t> by_key;
  for (int r = 0; r < int(descriptors.size()); ++r) {
    proto::Index d;
    BOOSTER_CHECK_T(IOError, d.ParseFromString(descriptors[size_t(r)]), "save: rank ", r, " sent a corrupt descriptor");
    for (auto& e : d.tensors()) {
      const Shape full(e.shape().begin(), e.shape().end());
      const DType dt = from_proto(e.dtype(), "save descriptor");
      auto [it, fresh] = meta.try_emplace(e.name(), full, dt);
      if (fresh) {
        order.push_back(e.name());
        first_rank[e.name()] = r;
      }
      BOOSTER_CHECK(it->second.first == full && it->second.second == dt, "save: tensor '", e.name(), "' is ",
                    dtype_name(dt), " ", shape_str(full), " on rank ", r, " but ", dtype_name(it->second.second), " ",
                    shape_str(it->second.first), " on rank ", first_rank[e.name()]);
      const Region reg = region_of(e.records(0), full, "save descriptor");
      auto [k, added] = by_key.try_emplace({e.name(), reg.str()}, pieces.size());
      if (added) pieces.push_back({e.name(), reg, dt, {}});
      pieces[k->second].holders.push_back(r);
    }
  }
  std::map<std::string, std::vector<Region>> regions;
  for (auto& p : pieces) regions[p.name].push_back(p.region);
  for (auto& [name, rs] : regions) check_tiling<ValueError>(name, meta[name].first, rs, "save");
  // Largest first, each to the holder with the fewest bytes so far (replicas share the work).
  std::vector<size_t> idx(pieces.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return pieces[a].bytes() > pieces[b].bytes(); });
  std::map<int, size_t> load;
  for (size_t i : idx) {
    Piece& p = pieces[i];
    p.writer = p.holders[0];
    for (int h : p.holders)
      if (load[h] < load[p.writer]) p.writer = h;
    load[p.writer] += p.bytes();
  }
  return pieces;
}

// The start of sub-region `sub` inside the local data of `parent` (sub lies inside it).
int64_t local_start(const Region& parent, const Region& sub) {
  const Run first = sub.runs().at(0);
  for (auto& r : parent.runs())
    if (first.start >= r.start && first.start < r.start + r.length) return r.local + (first.start - r.start);
  BOOSTER_THROW(ValueError, "save: ", sub.str(), " is not inside ", parent.str());
}

std::string shard_name(const WriteOptions& o, const std::string& save_id, int rank, int n) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "-%s-r%05d-%05d.shard", save_id.c_str(), rank, n);
  return o.prefix + o.kind + buf;
}

std::string part_name(const std::string& path, int rank) {
  const fs::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + ".part-" + std::to_string(rank))).string();
}

// This rank's share of a save: the pieces it writes, packed into its shard files (or its
// part of the single file) in the order given; finish() returns their locations (one entry
// per record) in an Index.
class RankWriter {
 public:
  RankWriter(std::string path, const std::vector<Piece>& pieces, WriteOptions o, std::string save_id, int rank)
      : path_(std::move(path)), o_(std::move(o)), save_id_(std::move(save_id)), rank_(rank) {
    for (auto& p : pieces)
      if (p.writer == rank_) mine_.insert(p.name + "@" + p.region.str());
    header_.set_format_version(kFormatVersion);
    header_.set_save_id(save_id_);
  }
  /// True once for each distinct piece this rank writes (a rank holding one twice writes it once).
  bool claims(const StateTensor& st) { return mine_.erase(st.name + "@" + st.region.str()) > 0; }
  /// Appends `data` (the region's elements, contiguous) as records of bounded size.
  void write(const std::string& name, const Region& region, const Tensor& data) {
    BOOSTER_CHECK_T(ShapeError, data.numel() == region.numel(), "save: tensor '", name, "' holds ", data.numel(),
                    " elements for ", region.str());
    if (!o_.shard && !w_) w_ = std::make_unique<ContainerWriter>(part_name(path_, rank_));
    const size_t es = dtype_size(data.dtype());
    const int64_t max_elems = int64_t(std::max<size_t>(1, std::min(o_.max_shard_bytes, kMaxRecordBytes) / es));
    for (const Region& sub : region.split(max_elems)) {
      const size_t bytes = size_t(sub.numel()) * es;
      if (o_.shard && (!w_ || (in_file_ > 0 && in_file_ + bytes > o_.max_shard_bytes))) open_next();
      const char* src = static_cast<const char*>(data.raw_data()) + size_t(local_start(region, sub)) * es;
      const proto::TensorRecord rec = make_record(name, data.dtype(), sub, src);
      auto* e = locs_.add_tensors();
      e->set_name(name);
      e->set_dtype(rec.dtype());
      *e->mutable_shape() = rec.shape();
      auto* loc = e->add_records();
      set_region(*loc, sub);
      loc->set_checksum(rec.checksum());
      loc->set_file(o_.shard ? file_ : "");
      loc->set_byte_offset(w_->append(rec));
      in_file_ += bytes;
    }
  }
  proto::Index finish(uint64_t& part_bytes) {
    if (w_) {
      part_bytes = w_->position();
      w_->commit();
      w_.reset();
    }
    return std::move(locs_);
  }

 private:
  void open_next() {
    if (w_) w_->commit();
    file_ = shard_name(o_, save_id_, rank_, ++files_);
    w_ = std::make_unique<ContainerWriter>((fs::path(path_) / file_).string());
    w_->append(header_);
    in_file_ = 0;
  }
  std::string path_;
  WriteOptions o_;
  std::string save_id_;
  int rank_;
  std::set<std::string> mine_;
  proto::Shard header_;
  proto::Index locs_;
  std::unique_ptr<ContainerWriter> w_;
  std::string file_;
  int files_ = 0;
  size_t in_file_ = 0;
};

// Rank 0: the merged index, written last (one file: the parts concatenated, then the index).
void write_index(const std::string& path, const std::vector<std::string>& order, const std::vector<proto::Index>& ranks,
                 const std::vector<uint64_t>& part_bytes, const WriteOptions& o, const std::string& save_id) {
  proto::Index index;
  index.set_format_version(kFormatVersion);
  index.set_kind(o.kind);
  index.set_save_id(save_id);
  *index.mutable_layout() = o.layout;
  if (o.optimizer) *index.mutable_optimizer() = *o.optimizer;
  std::map<std::string, proto::TensorEntry*> entries;
  for (auto& name : order) {
    auto* e = index.add_tensors();
    e->set_name(name);
    entries[name] = e;
  }
  proto::Shard header;
  header.set_format_version(kFormatVersion);
  header.set_save_id(save_id);
  std::unique_ptr<ContainerWriter> single;
  std::vector<uint64_t> base(ranks.size(), 0);
  if (!o.shard) {
    single = std::make_unique<ContainerWriter>(path);
    single->append(header);
    for (size_t r = 0; r < ranks.size(); ++r) {
      base[r] = single->position() - kMagicBytes;  // a part's offsets count its own magic
      if (part_bytes[r] > 0) single->append_file(part_name(path, int(r)), kMagicBytes);
    }
  }
  std::set<std::string> files;
  for (size_t r = 0; r < ranks.size(); ++r)
    for (auto& src : ranks[r].tensors()) {
      proto::TensorEntry* e = entries.at(src.name());
      e->set_dtype(src.dtype());
      *e->mutable_shape() = src.shape();
      for (auto loc : src.records()) {
        if (!o.shard) loc.set_byte_offset(loc.byte_offset() + base[r]);
        else files.insert(loc.file());
        *e->add_records() = loc;
      }
    }
  for (auto& f : files) index.add_shard_files(f);
  if (single) {
    single->append_sealed(index);
    single->commit();
    for (size_t r = 0; r < ranks.size(); ++r) fs::remove(part_name(path, int(r)));
    return;
  }
  const std::string index_name = index_file_name(o.prefix, o.kind);
  write_message_file((fs::path(path) / index_name).string(), index);
  // Only now are the previous save's shards unreferenced. Shards and temp files of saves
  // that were killed midway go too (one writer owns a checkpoint folder at a time).
  const std::string stem = o.prefix + o.kind + "-";
  for (auto& entry : fs::directory_iterator(path)) {
    const std::string f = entry.path().filename().string(), target = temp_file_target(f);
    const std::string& name = target.empty() ? f : target;
    const bool shard = name.rfind(stem, 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".shard") == 0;
    if ((shard && !files.count(f)) || (!target.empty() && name == index_name)) fs::remove(entry.path());
  }
}

}  // namespace

std::string index_file_name(const std::string& prefix, const std::string& kind) { return prefix + kind + ".index"; }

namespace {

// A save planned over every rank: the pieces assigned, the save's id, this rank's writer.
struct PlannedSave {
  std::vector<std::string> order;
  std::vector<Piece> pieces;
  std::string save_id;
  std::unique_ptr<RankWriter> writer;
};

// Collective over the world: every rank's tensors described, checked and assigned.
PlannedSave plan_save(const std::string& path, const ShardedState& mine, const WriteOptions& opts, const World& world) {
  BOOSTER_CHECK(opts.max_shard_bytes > 0, "save: size_per_shard must be positive");
  // What each rank holds; a rank that cannot describe its tensors still takes part, so
  // every rank learns of the failure instead of waiting.
  std::string descriptor;
  try {
    descriptor = "D" + describe(mine);
  } catch (const std::exception& e) {
    descriptor = "E" + std::string(e.what());
  }
  std::vector<std::string> descriptors = world.all_gather(descriptor);
  std::string bad;
  for (size_t r = 0; r < descriptors.size(); ++r) {
    if (descriptors[r].empty() || descriptors[r][0] != 'D') bad += "\n  rank " + std::to_string(r) + ": " + descriptors[r].substr(1);
    else descriptors[r].erase(0, 1);
  }
  BOOSTER_CHECK(bad.empty(), "saving '", path, "' failed (nothing was written):", bad);
  PlannedSave s;
  s.pieces = plan(descriptors, s.order);  // the same on every rank: throws alike
  s.save_id = world.all_gather(world.rank() == 0 ? new_save_id() : "")[0];
  s.writer = std::make_unique<RankWriter>(path, s.pieces, opts, s.save_id, world.rank());
  return s;
}

void make_folders(const std::string& path, const WriteOptions& opts) {
  if (opts.shard) fs::create_directories(path);
  else if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
}

// Collective over `world`: every rank's record locations (or its error) gathered, and the
// index written by rank 0 last.
void finish_save(const std::string& path, PlannedSave& s, std::string error, const WriteOptions& opts,
                 const World& world) {
  proto::Index mine_locs;
  uint64_t part_bytes = 0;
  try {
    if (error.empty()) mine_locs = s.writer->finish(part_bytes);
  } catch (const std::exception& e) {
    error = e.what();
  }
  mine_locs.mutable_metadata()->insert({"error", error});
  mine_locs.mutable_metadata()->insert({"part_bytes", std::to_string(part_bytes)});
  const auto all = world.all_gather(mine_locs.SerializeAsString());
  std::vector<proto::Index> ranks(all.size());
  std::vector<uint64_t> parts(all.size());
  std::string failures;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!ranks[r].ParseFromString(all[r])) failures += "\n  rank " + std::to_string(r) + ": corrupt record locations";
    const auto& md = ranks[r].metadata();
    if (md.count("error") && !md.at("error").empty()) failures += "\n  rank " + std::to_string(r) + ": " + md.at("error");
    parts[r] = md.count("part_bytes") ? std::stoull(md.at("part_bytes")) : 0;
  }
  BOOSTER_CHECK_T(IOError, failures.empty(), "saving '", path, "' failed (the previous checkpoint is untouched):", failures);
  if (world.rank() == 0) {
    try {
      write_index(path, s.order, ranks, parts, opts, s.save_id);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::string index_error = world.all_gather(world.rank() == 0 ? error : "")[0];
  BOOSTER_CHECK_T(IOError, index_error.empty(), "saving '", path, "' failed on rank 0 writing the index: ", index_error);
}

// A piece copied for an asynchronous save, written behind training.
struct Staged {
  std::string name;
  Region region;
  Tensor data;
};

// This rank's pieces, each once: copied into `arena` (null: none) while they fit `budget`
// bytes, the rest written now (state on the disk tier is in RAM only while it is copied or
// written). Returns the error met, empty when none; `written_now` receives the bytes written.
std::string stage_or_write(const std::string& path, const ShardedState& mine, const WriteOptions& opts, PlannedSave& s,
                           StagingArena* arena, size_t budget, std::vector<Staged>& staged, size_t& written_now) {
  try {
    make_folders(path, opts);
    // Which pieces are staged, decided first so that the arena is sized once.
    std::vector<std::pair<const StateTensor*, bool>> todo;
    size_t staged_bytes = 0;
    for (auto& st : mine) {
      if (!s.writer->claims(st)) continue;
      const size_t bytes = StagingArena::slot_bytes(size_t(st.region.numel()) * dtype_size(st.dtype()));
      const bool stage = arena && staged_bytes + bytes <= budget;
      if (stage) staged_bytes += bytes;
      todo.emplace_back(&st, stage);
    }
    if (arena) arena->begin(staged_bytes);
    for (auto& [st, stage] : todo) {
      const HeldState held(*st);
      if (stage) {
        staged.push_back({st->name, st->region, arena->stage(held.data().detach())});
      } else {
        s.writer->write(st->name, st->region, held.data().detach().contiguous());
        written_now += size_t(st->region.numel()) * dtype_size(st->dtype());
      }
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// How many bytes an asynchronous save may stage in RAM: BOOSTER_ASYNC_STAGING_MB, else half
// of what the kernel reports available.
size_t default_staging_bytes() {
  if (const char* env = std::getenv("BOOSTER_ASYNC_STAGING_MB")) return size_t(std::max(0.0, std::atof(env))) << 20;
  // Lines of "Key:   value kB" (reading key and value pairs stopped at the first "kB",
  // so the budget was always the fallback's 1 GB).
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    size_t kb = 0;
    if (fields >> key >> kb && key == "MemAvailable:") return kb * 1024 / 2;
  }
  return size_t(1) << 30;
}

void save_state(const std::string& path, const ShardedState& mine, const WriteOptions& opts) {
  const World world;
  PlannedSave s = plan_save(path, mine, opts, world);
  std::vector<Staged> none;
  size_t written = 0;
  const std::string error = stage_or_write(path, mine, opts, s, nullptr, 0, none, written);
  finish_save(path, s, error, opts, world);
}

void save_state_async(const std::string& path, const ShardedState& mine, const WriteOptions& opts, AsyncWriter& writer,
                      std::optional<size_t> staging_bytes) {
  if (writer.pending(opts.kind)) writer.synchronize();  // one staged snapshot of a kind at a time
  auto s = std::make_shared<PlannedSave>(plan_save(path, mine, opts, World{}));
  // The caller's optimizer metadata is gone by the time the index is written: a copy.
  auto meta = opts.optimizer ? std::make_shared<proto::OptimizerMeta>(*opts.optimizer) : nullptr;
  // The snapshot: what fits the staging budget copied, the rest written now, before training
  // goes on (the file is its staging tier).
  const size_t budget = staging_bytes ? *staging_bytes : default_staging_bytes();
  auto staged = std::make_shared<std::vector<Staged>>();
  size_t written_now = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::string error = stage_or_write(path, mine, opts, *s, &writer.arena(opts.kind), budget, *staged, written_now);
  size_t staged_bytes = 0;
  for (auto& t : *staged) staged_bytes += size_t(t.data.numel()) * dtype_size(t.data.dtype());
  spdlog::debug("save_{} to '{}' (use_async): {:.1f} MB staged in {:.2f} s", opts.kind, path,
                double(staged_bytes) / (1 << 20),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (written_now > 0)
    spdlog::info("save_{} to '{}' (use_async): {:.1f} MB written before training went on, beyond the staging budget "
                 "of {:.1f} MB (BOOSTER_ASYNC_STAGING_MB sets it)",
                 opts.kind, path, double(written_now) / (1 << 20), double(budget) / (1 << 20));
  writer.submit(
      [path, o = opts, s, staged, error, meta](const dist::ProcessGroup* group) mutable {
        o.optimizer = meta.get();
        World world;
        world.group = group;
        try {
          for (auto& t : *staged) {
            if (!error.empty()) break;
            s->writer->write(t.name, t.region, t.data);
          }
        } catch (const std::exception& e) {
          error = e.what();
        }
        staged->clear();
        finish_save(path, *s, error, o, world);
      },
      "save_" + opts.kind + " to '" + path + "' (use_async)", opts.kind);
}

}  // namespace booster::ckpt
