// The distributed checkpoint writer (see writer.h).
#include "booster/checkpoint/writer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

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

// Writes this rank's pieces; returns their locations (one entry per record) in an Index.
proto::Index write_mine(const std::string& path, const ShardedState& mine, const std::vector<Piece>& pieces,
                        const WriteOptions& o, const std::string& save_id, int rank, uint64_t& part_bytes) {
  std::map<std::pair<std::string, std::string>, const Piece*> by_key;
  for (auto& p : pieces) by_key[{p.name, p.region.str()}] = &p;
  proto::Shard header;
  header.set_format_version(kFormatVersion);
  header.set_save_id(save_id);
  proto::Index locs;
  std::unique_ptr<ContainerWriter> w;
  std::string file;
  int files = 0;
  size_t in_file = 0;
  auto open_next = [&] {
    if (w) w->commit();
    file = shard_name(o, save_id, rank, ++files);
    w = std::make_unique<ContainerWriter>((fs::path(path) / file).string());
    w->append(header);
    in_file = 0;
  };
  if (!o.shard) w = std::make_unique<ContainerWriter>(part_name(path, rank));
  std::set<std::string> done;  // a rank holding one piece twice writes it once
  for (auto& st : mine) {
    const Piece* p = by_key.at({st.name, st.region.str()});
    if (p->writer != rank || !done.insert(st.name + "@" + st.region.str()).second) continue;
    const HeldState held(st);  // state on the disk tier is in RAM only while it is written
    const Tensor data = held.data().detach().contiguous();
    BOOSTER_CHECK_T(ShapeError, data.numel() == st.region.numel(), "save: tensor '", st.name, "' holds ", data.numel(),
                    " elements for ", st.region.str());
    const size_t es = dtype_size(data.dtype());
    const int64_t max_elems = int64_t(std::max<size_t>(1, std::min(o.max_shard_bytes, kMaxRecordBytes) / es));
    for (const Region& sub : st.region.split(max_elems)) {
      const size_t bytes = size_t(sub.numel()) * es;
      if (o.shard && (!w || (in_file > 0 && in_file + bytes > o.max_shard_bytes))) open_next();
      const char* src = static_cast<const char*>(data.raw_data()) + size_t(local_start(st.region, sub)) * es;
      const proto::TensorRecord rec = make_record(st.name, data.dtype(), sub, src);
      auto* e = locs.add_tensors();
      e->set_name(st.name);
      e->set_dtype(rec.dtype());
      *e->mutable_shape() = rec.shape();
      auto* loc = e->add_records();
      set_region(*loc, sub);
      loc->set_checksum(rec.checksum());
      loc->set_file(o.shard ? file : "");
      loc->set_byte_offset(w->append(rec));
      in_file += bytes;
    }
  }
  if (w) {
    part_bytes = w->position();
    w->commit();
  }
  return locs;
}

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

void save_state(const std::string& path, const ShardedState& mine, const WriteOptions& opts) {
  BOOSTER_CHECK(opts.max_shard_bytes > 0, "save: size_per_shard must be positive");
  const World world;
  // What each rank holds; a rank that cannot describe its tensors still takes part, so
  // every rank learns of the failure instead of waiting.
  std::string descriptor, error;
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
  std::vector<std::string> order;
  const std::vector<Piece> pieces = plan(descriptors, order);  // the same on every rank: throws alike
  const std::string save_id = world.all_gather(world.rank() == 0 ? new_save_id() : "")[0];

  proto::Index mine_locs;
  uint64_t part_bytes = 0;
  try {
    if (opts.shard) fs::create_directories(path);
    else if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
    mine_locs = write_mine(path, mine, pieces, opts, save_id, world.rank(), part_bytes);
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
      write_index(path, order, ranks, parts, opts, save_id);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::string index_error = world.all_gather(world.rank() == 0 ? error : "")[0];
  BOOSTER_CHECK_T(IOError, index_error.empty(), "saving '", path, "' failed on rank 0 writing the index: ", index_error);
}

}  // namespace booster::ckpt
