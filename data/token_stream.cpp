// Token files, the windowed token stream and the character-level text cache (see token_stream.h).
#include "data/token_stream.h"

#include "data/bpe_tokenizer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/common/file_util.h"

namespace booster::data {

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderInts = 256;

int width_of(const std::string& dtype, const std::string& path) {
  if (dtype == "uint16" || dtype == "u16") return 2;
  if (dtype == "uint32" || dtype == "u32") return 4;
  BOOSTER_THROW(ValueError, "token file '", path, "': data.dtype must be \"uint16\" or \"uint32\", got \"", dtype, "\"");
}

std::string token_bytes(const std::vector<int64_t>& tokens, int width) {
  BOOSTER_CHECK(width == 2 || width == 4, "token file: width must be 2 or 4 bytes, got ", width);
  const int64_t top = width == 2 ? 0xFFFF : 0xFFFFFFFFLL;
  std::string out(tokens.size() * size_t(width), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    BOOSTER_CHECK(tokens[i] >= 0 && tokens[i] <= top, "token file: token ", i, " = ", tokens[i], " does not fit in ",
                  width * 8, " bits");
    if (width == 2) {
      const uint16_t v = uint16_t(tokens[i]);
      std::memcpy(out.data() + i * 2, &v, 2);
    } else {
      const uint32_t v = uint32_t(tokens[i]);
      std::memcpy(out.data() + i * 4, &v, 4);
    }
  }
  return out;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

TokenFile::TokenFile(const std::string& path, const std::string& dtype) : path_(path) {
  width_ = width_of(dtype, path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  BOOSTER_CHECK_T(IOError, fd >= 0, "token file '", path, "' cannot be opened: ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  map_bytes_ = size_t(st.st_size);
  if (map_bytes_ > 0) map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  BOOSTER_CHECK_T(IOError, map_ != MAP_FAILED, "token file '", path, "' cannot be mapped: ", std::strerror(errno));
  const char* bytes = static_cast<const char*>(map_);
  size_t body = map_bytes_;
  int32_t head[3] = {0, 0, 0};
  if (map_bytes_ >= sizeof(head)) std::memcpy(head, bytes, sizeof(head));
  if (head[0] == kLlmcMagic) {  // llm.c's header: magic, version (1: uint16, 2: uint32), token count
    header_ = true;
    const size_t hb = kLlmcHeaderInts * sizeof(int32_t);
    BOOSTER_CHECK_T(IOError, map_bytes_ >= hb, "token file '", path, "' opens with llm.c's magic but is ", map_bytes_,
                    " bytes, shorter than its ", hb, "-byte header (truncated?)");
    BOOSTER_CHECK_T(IOError, head[1] == 1 || head[1] == 2, "token file '", path, "': llm.c header version ", head[1],
                    " is not 1 (uint16 tokens) or 2 (uint32 tokens)");
    width_ = head[1] == 1 ? 2 : 4;
    BOOSTER_CHECK_T(IOError, head[2] >= 0 && size_t(head[2]) * size_t(width_) == map_bytes_ - hb, "token file '", path,
                    "': its header counts ", head[2], " tokens of ", width_, " bytes, the file holds ", map_bytes_ - hb,
                    " bytes after the header (truncated or damaged)");
    tokens_ = bytes + hb;
    body = map_bytes_ - hb;
  } else {
    tokens_ = bytes;
    BOOSTER_CHECK_T(IOError, body % size_t(width_) == 0, "token file '", path, "' is ", body, " bytes, not whole ",
                    width_ * 8, "-bit tokens (data.dtype \"", dtype, "\"; truncated, or the wrong width?)");
  }
  n_ = int64_t(body / size_t(width_));
}

TokenFile::~TokenFile() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
}

void write_llmc_tokens(const std::string& path, const std::vector<int64_t>& tokens, int width) {
  std::vector<int32_t> head(kLlmcHeaderInts, 0);
  head[0] = kLlmcMagic, head[1] = width == 2 ? 1 : 2, head[2] = int32_t(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(int32_t));
  write_file_atomic(path, bytes + token_bytes(tokens, width));
}

void write_nanogpt_tokens(const std::string& path, const std::vector<int64_t>& tokens, int width) {
  write_file_atomic(path, token_bytes(tokens, width));
}

TokenStream::TokenStream(const std::string& path, TokenStreamOptions opts)
    : file_(std::make_shared<TokenFile>(path, opts.dtype)), opts_(std::move(opts)) {
  BOOSTER_CHECK(opts_.block_size >= 1, "TokenStream '", path, "': block_size must be >= 1, got ", opts_.block_size);
  BOOSTER_CHECK_T(DTypeError, is_index(opts_.ids_dtype), "TokenStream '", path, "': ids_dtype must be i64 or i32, got ",
                  dtype_name(opts_.ids_dtype));
  BOOSTER_CHECK_T(IOError, file_->size() > opts_.block_size, "TokenStream '", path, "' holds ", file_->size(),
                  " tokens, too few for one window of block_size ", opts_.block_size, " + 1");
  windows_ = size_t((file_->size() - 1) / opts_.block_size);
  // Random windows are draws: an epoch may ask for more than the file's consecutive ones.
  if (opts_.limit > 0) windows_ = opts_.random_windows ? opts_.limit : std::min(windows_, opts_.limit);
}

Example TokenStream::get(size_t index, Generator& g) const {
  BOOSTER_CHECK(index < windows_, "TokenStream: window ", index, " of ", windows_);
  const int64_t t = opts_.block_size, last = file_->size() - t - 1;  // the last start with t + 1 tokens
  // nanoGPT's torch.randint(len(data) - block_size): a start in [0, last].
  const int64_t start = opts_.random_windows ? int64_t(g.next_u64() % uint64_t(last + 1)) : int64_t(index) * t;
  std::vector<int64_t> x(static_cast<size_t>(t)), y(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) x[size_t(i)] = (*file_)[start + i], y[size_t(i)] = (*file_)[start + i + 1];
  if (opts_.ids_dtype == DType::i32)
    for (int64_t i = 0; i <= t; ++i)
      BOOSTER_CHECK_T(ValueError, (*file_)[start + i] <= INT32_MAX, "TokenStream '", file_->path(), "': token ",
                      (*file_)[start + i], " at position ", start + i, " does not fit ids_dtype i32");
  return {{"input_ids", Tensor::from_ints(x, {t}).to(opts_.ids_dtype)}, {"labels", Tensor::from_ints(y, {t}).to(opts_.ids_dtype)}};
}

int64_t CharVocab::encode(unsigned char c) const {
  const auto at = chars.find(char(c));
  BOOSTER_CHECK(at != std::string::npos, "CharVocab: byte ", int(c), " is not in the vocabulary");
  return int64_t(at);
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t i : ids) {
    BOOSTER_CHECK(i >= 0 && i < int64_t(chars.size()), "CharVocab: id ", i, " outside the vocabulary of ", chars.size());
    out += chars[size_t(i)];
  }
  return out;
}

namespace {

// The cache's vocabulary (characters, and its size) from its meta.json, when it was made from
// a text of this size and checksum by this tokenizer `recipe`.
std::optional<std::pair<CharVocab, int64_t>> read_meta(const std::filesystem::path& dir, size_t bytes, uint64_t sum, double val_fraction,
                                   const std::string& recipe) {
  const auto meta = dir / "meta.json";
  if (!file_exists(meta.string()) || !file_exists((dir / "train.bin").string()) || !file_exists((dir / "val.bin").string()))
    return std::nullopt;
  try {
    auto j = nlohmann::json::parse(read_text_file(meta.string()));
    if (j.at("source_bytes").get<size_t>() != bytes || j.at("source_fnv1a").get<uint64_t>() != sum ||
        j.at("val_fraction").get<double>() != val_fraction || j.value("tokenizer", std::string("char")) != recipe)
      return std::nullopt;
    CharVocab v;
    for (int c : j.at("itos").get<std::vector<int>>()) v.chars += char(c);
    return std::make_pair(v, j.at("vocab_size").get<int64_t>());
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a damaged meta.json is made again
  }
}

// An exclusive lock on dir/.lock for the scope (flock: released by the kernel if the holder dies).
class DirLock {
 public:
  explicit DirLock(const std::filesystem::path& dir) {
    const std::string p = (dir / ".lock").string();
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT, 0644);
    BOOSTER_CHECK_T(IOError, fd_ >= 0, "text cache: cannot open the lock file '", p, "': ", std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      BOOSTER_CHECK_T(IOError, errno == EINTR, "text cache: cannot lock '", p, "': ", std::strerror(errno));
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

namespace {

// The text's tokens by characters (the vocabulary into cache.vocab) or by a byte-level BPE
// (trained on the training split, or the one given; written to cache.tokenizer_json);
// returns the ids and the index where validation starts.
std::pair<std::vector<int64_t>, size_t> tokenize(const std::string& text, double val_fraction, const TextTokenizer& t,
                                                 TextCache& out) {
  auto split = size_t(double(text.size()) * (1.0 - val_fraction));
  std::vector<int64_t> ids;
  if (t.kind == "char") {
    bool seen[256] = {};
    for (unsigned char c : text) seen[c] = true;
    for (int c = 0; c < 256; ++c)
      if (seen[c]) out.vocab.chars += char(c);
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(out.vocab.encode(c));
    out.vocab_size = int64_t(out.vocab.chars.size());
    return {ids, split};
  }
  while (split > 0 && split < text.size() && (static_cast<unsigned char>(text[split]) & 0xC0) == 0x80) --split;  // a character's start
  const ByteLevelBPE bpe = t.tokenizer_json.empty() ? ByteLevelBPE::train(text.substr(0, split), t.bpe_vocab_size)
                                                    : ByteLevelBPE::from_tokenizer_json(t.tokenizer_json);
  bpe.save(out.tokenizer_json);
  ids = bpe.encode(text.substr(0, split));
  const size_t n_train = ids.size();
  const auto val = bpe.encode(text.substr(split));
  ids.insert(ids.end(), val.begin(), val.end());
  out.vocab_size = bpe.vocab_size();
  return {ids, n_train};
}

}  // namespace

TextCache tokenize_text_cached(const std::string& text_path, const std::string& cache_dir, double val_fraction,
                               const TextTokenizer& tokenizer) {
  BOOSTER_CHECK(val_fraction >= 0 && val_fraction < 1, "tokenize_text_cached: val_fraction must be in [0, 1), got ",
                val_fraction);
  BOOSTER_CHECK(tokenizer.kind == "char" || tokenizer.kind == "bpe", "data.tokenizer '", tokenizer.kind,
                "' is not one of char, bpe");
  const std::string text = read_text_file(text_path);
  BOOSTER_CHECK_T(IOError, text.size() >= 2, "text file '", text_path, "' holds ", text.size(), " bytes: nothing to train on");
  const uint64_t sum = fnv1a(text);
  // What made the tokens: a cache of another tokenizer is made again.
  const std::string recipe = tokenizer.kind == "char" ? "char"
                             : tokenizer.tokenizer_json.empty()
                                 ? "bpe trained to " + std::to_string(tokenizer.bpe_vocab_size)
                                 : "bpe " + std::to_string(fnv1a(read_text_file(tokenizer.tokenizer_json)));
  const std::filesystem::path dir(cache_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  BOOSTER_CHECK_T(IOError, std::filesystem::is_directory(dir), "data.cache_dir '", cache_dir,
                  "' cannot be made: ", ec.message(), " (the shared data folder is read-only: give a writable cache_dir)");
  TextCache out{(dir / "train.bin").string(), (dir / "val.bin").string(), {}, "", 0};
  if (tokenizer.kind == "bpe") out.tokenizer_json = (dir / "tokenizer.json").string();
  DirLock lock(dir);
  auto v = read_meta(dir, text.size(), sum, val_fraction, recipe);
  if (v && (tokenizer.kind == "char" || file_exists(out.tokenizer_json))) {
    std::tie(out.vocab, out.vocab_size) = *v;
    return out;
  }
  const auto [ids, n_train] = tokenize(text, val_fraction, tokenizer, out);
  BOOSTER_CHECK(out.vocab_size <= 65536, "tokenize_text_cached: ", out.vocab_size,
                " tokens do not fit nanoGPT's uint16 token files");
  write_nanogpt_tokens(out.train_bin, std::vector<int64_t>(ids.begin(), ids.begin() + int64_t(n_train)));
  write_nanogpt_tokens(out.val_bin, std::vector<int64_t>(ids.begin() + int64_t(n_train), ids.end()));
  std::vector<int> itos;
  for (char c : out.vocab.chars) itos.push_back(int(static_cast<unsigned char>(c)));
  nlohmann::json meta{{"vocab_size", out.vocab_size}, {"itos", itos}, {"source", text_path}, {"source_bytes", text.size()},
                      {"source_fnv1a", sum}, {"val_fraction", val_fraction}, {"dtype", "uint16"}, {"tokenizer", recipe}};
  write_file_atomic((dir / "meta.json").string(), meta.dump(1) + "\n");  // last: the cache is whole once it is there
  return out;
}

}  // namespace booster::data
