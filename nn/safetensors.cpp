// safetensors: 8-byte little-endian header length, JSON header {name: {dtype, shape,
// data_offsets}}, then the data. Validated strictly before any tensor is built. The file is
// mapped (copy-on-write), not read: a tensor's pages are read when first touched, so a rank
// that copies out only its slice or shard (a lazy model's source) reads only those.
#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/common/file_util.h"

namespace booster::nn {

using nlohmann::json;

namespace {

DType parse_dtype(const std::string& s, const std::string& file, const std::string& name) {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  if (s == "I64") return DType::i64;
  if (s == "U8") return DType::u8;
  if (s == "I32") return DType::i32;
  BOOSTER_THROW(IOError, file, ": tensor '", name, "' has unsupported dtype '", s, "' (F32, F16, BF16, I64, I32, U8)");
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
  }
  return "?";
}

}  // namespace

Tensor SafetensorsFile::at(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return t;
  BOOSTER_THROW(IOError, path, ": no tensor '", name, "'");
}

bool SafetensorsFile::contains(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

namespace {
// A file mapped read-write copy-on-write (writes to its tensors stay in this process),
// unmapped when the last tensor viewing it dies.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BOOSTER_CHECK_T(IOError, fd >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      BOOSTER_THROW(IOError, path, ": not a regular file");
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      BOOSTER_CHECK_T(IOError, p != MAP_FAILED, path, ": cannot map ", size_, " bytes: ", std::strerror(err));
      data_ = static_cast<char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (data_) ::munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};
}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  auto map = std::make_shared<Mapping>(path);
  const std::string_view bytes(map->data() ? map->data() : "", map->size());
  BOOSTER_CHECK_T(IOError, bytes.size() >= 8, path, ": truncated safetensors file (", bytes.size(),
                  " bytes, the header length alone takes 8)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  BOOSTER_CHECK_T(IOError, hlen <= bytes.size() - 8, path, ": header length ", hlen, " exceeds the file (",
                  bytes.size(), " bytes): truncated or not a safetensors file");
  json h;
  try {
    h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(hlen));
  } catch (const json::exception& e) {
    BOOSTER_THROW(IOError, path, ": header is not valid JSON: ", e.what());
  }
  BOOSTER_CHECK_T(IOError, h.is_object(), path, ": header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - hlen;
  char* data = map->data() ? map->data() + 8 + hlen : nullptr;
  SafetensorsFile f;
  f.path = path;
  struct Entry {
    std::string name;
    DType dt;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      BOOSTER_CHECK_T(IOError, v.is_object(), path, ": __metadata__ must be an object of strings");
      for (auto& [k, mv] : v.items()) {
        BOOSTER_CHECK_T(IOError, mv.is_string(), path, ": __metadata__['", k, "'] is not a string");
        f.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    BOOSTER_CHECK_T(IOError, v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                    path, ": tensor '", name, "' lacks dtype, shape or data_offsets");
    Entry e{name, parse_dtype(v["dtype"].is_string() ? v["dtype"].get<std::string>() : "?", path, name), {}, 0, 0};
    BOOSTER_CHECK_T(IOError, v["shape"].is_array(), path, ": tensor '", name, "': shape is not a list");
    for (auto& d : v["shape"]) {
      BOOSTER_CHECK_T(IOError, d.is_number_unsigned(), path, ": tensor '", name, "': shape has a non-integer or negative dim");
      e.shape.push_back(d.get<int64_t>());
    }
    auto& off = v["data_offsets"];
    BOOSTER_CHECK_T(IOError, off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                    path, ": tensor '", name, "': data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    const uint64_t need = uint64_t(shape_numel(e.shape)) * dtype_size(e.dt);
    BOOSTER_CHECK_T(IOError, e.begin <= e.end && e.end - e.begin == need, path, ": tensor '", name, "': data_offsets [",
                    e.begin, ", ", e.end, ") hold ", e.end - e.begin, " bytes, but ", dtype_name(e.dt), " ",
                    shape_str(e.shape), " needs ", need);
    BOOSTER_CHECK_T(IOError, e.end <= data_size, path, ": tensor '", name, "' ends at byte ", e.end,
                    " of the data section, which has only ", data_size, " bytes: file truncated");
    entries.push_back(std::move(e));
  }
  // Tensors must not overlap (the format also forbids holes; we only insist on no overlap).
  std::vector<const Entry*> by_off;
  for (auto& e : entries) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_off.size(); ++i)
    BOOSTER_CHECK_T(IOError, by_off[i]->begin >= by_off[i - 1]->end || by_off[i - 1]->begin == by_off[i - 1]->end,
                    path, ": tensors '", by_off[i - 1]->name, "' and '", by_off[i]->name, "' overlap");
  for (auto* e : by_off) {
    Tensor t = e->end > e->begin ? Tensor::from_blob(data + e->begin, e->shape, e->dt, [map](void*) {})
                                 : Tensor::zeros(e->shape, e->dt);
    f.tensors.emplace_back(e->name, t);
  }
  return f;
}

void save_safetensors(const std::string& path, const StateDict& tensors, const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::vector<Tensor> contig;
  for (auto& [name, t] : tensors) {
    Tensor c = t.detach().contiguous();
    const uint64_t n = c.nbytes();
    h[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {off, off + n}}};
    off += n;
    contig.push_back(c);
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8) header.push_back(' ');  // align data to 8 bytes, as the reference writer does
  std::string out;
  out.reserve(8 + header.size() + off);
  const uint64_t hlen = header.size();
  out.append(reinterpret_cast<const char*>(&hlen), 8);
  out += header;
  for (auto& c : contig) out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  write_file_atomic(path, out);
}

StateDict load_safetensors_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    const fs::path single = fs::path(dir) / "model.safetensors";
    BOOSTER_CHECK_T(IOError, fs::exists(single), dir, ": no model.safetensors or model.safetensors.index.json");
    return load_safetensors(single.string()).tensors;
  }
  json j;
  try {
    j = json::parse(read_text_file(index.string()));
  } catch (const json::exception& e) {
    BOOSTER_THROW(IOError, index.string(), ": not valid JSON: ", e.what());
  }
  BOOSTER_CHECK_T(IOError, j.contains("weight_map") && j["weight_map"].is_object(), index.string(), ": no weight_map");
  std::map<std::string, std::vector<std::string>> by_file;
  for (auto& [name, file] : j["weight_map"].items()) {
    BOOSTER_CHECK_T(IOError, file.is_string(), index.string(), ": weight_map['", name, "'] is not a file name");
    by_file[file.get<std::string>()].push_back(name);
  }
  StateDict out;
  for (auto& [file, names] : by_file) {
    SafetensorsFile f = load_safetensors((fs::path(dir) / file).string());
    for (auto& n : names) {
      BOOSTER_CHECK_T(IOError, f.contains(n), index.string(), " lists tensor '", n, "' in '", file,
                      "', which does not hold it");
      out.emplace_back(n, f.at(n));
    }
  }
  return out;
}

void save_safetensors_dir(const std::string& dir, const StateDict& tensors, size_t max_shard_bytes) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  size_t total = 0;
  for (auto& [n, t] : tensors) total += t.nbytes();
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
    return;
  }
  std::vector<StateDict> shards(1);
  size_t cur = 0;
  for (auto& [n, t] : tensors) {
    if (cur > 0 && cur + t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().emplace_back(n, t);
    cur += t.nbytes();
  }
  json wm = json::object();
  char buf[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors((fs::path(dir) / buf).string(), shards[i]);
    for (auto& [n, t] : shards[i]) wm[n] = buf;
  }
  json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", wm}};
  write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), idx.dump(2));
}

}  // namespace booster::nn
