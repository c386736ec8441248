// oneDNN engine, descriptors and the primitive cache.
#include "core/kernels/dnnl_util.h"

#include <omp.h>

#include <atomic>
#include <mutex>

#include "core/kernels/blocked_pack.h"
#include "core/kernels/dispatch.h"

namespace booster::kernels {

namespace {
thread_local bool t_reference = false;
std::atomic<bool> g_fused_attention{true}, g_fused_normalization{true};
}  // namespace

bool use_reference() { return t_reference; }
void set_fused_kernels(const FusedKernels& f) {
  g_fused_attention = f.attention;
  g_fused_normalization = f.normalization;
}
FusedKernels fused_kernels() { return {g_fused_attention.load(), g_fused_normalization.load()}; }
ReferenceGuard::ReferenceGuard() : prev_(t_reference) { t_reference = true; }
ReferenceGuard::~ReferenceGuard() { t_reference = prev_; }

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    case DType::u8: return dnnl::memory::data_type::u8;
    case DType::i32: return dnnl::memory::data_type::s32;
    case DType::i64: break;
  }
  BOOSTER_THROW(DTypeError, "oneDNN has no ", dtype_name(t), " type");
}

dnnl::memory::desc md_of(const Shape& dims, const Shape& strides, DType t) {
  if (dims.empty()) return dnnl::memory::desc({1}, dnnl_type(t), dnnl::memory::dims{1});
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dnnl_type(t),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc md_of(const Tensor& t) { return md_of(t.shape(), t.strides(), t.dtype()); }

dnnl::memory mem_of(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, cpu_engine(), t.raw_data());
}

KeyBuilder& KeyBuilder::add(const Tensor& t) {
  add(int64_t(t.dtype()));
  add(int64_t(t.dim()));
  for (int64_t d : t.shape()) add(d);
  for (int64_t s : t.strides()) add(s);
  return *this;
}

namespace {
// Primitives by the threads oneDNN may use where they are made (some size their scratchpad's
// per-thread parts by it: layer normalization's backward sums its weight gradient over
// them), then by key. A batch share's thread (nn::split_batch) sets its own count to one and
// gets primitives of its own: one made for the whole rank, run on such a thread, would sum
// parts it never wrote.
struct Cache {
  std::mutex mu;
  std::unordered_map<int, std::unordered_map<std::string, CachedPrimitive>> by_threads;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}
}  // namespace

const CachedPrimitive& cached_primitive(
    const std::string& key, const std::function<std::pair<dnnl::primitive, dnnl::primitive_desc_base>()>& make) {
  Cache& c = cache();
  const int threads = omp_get_max_threads();
  {
    std::lock_guard lock(c.mu);
    auto& map = c.by_threads[threads];
    auto it = map.find(key);
    if (it != map.end()) return it->second;
  }
  CachedPrimitive entry;
  try {
    auto [prim, pd] = make();
    BOOSTER_CHECK(pd.get_primitive_attr().get_scratchpad_mode() == dnnl::scratchpad_mode::user,
                  "oneDNN primitive created without kernels::user_scratchpad_attr(): its scratchpad would be shared between threads");
    entry.prim = prim;
    entry.pd = pd;
    const char* impl = pd.impl_info_str();
    entry.impl = impl ? impl : "";
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) BOOSTER_THROW(BackendError, "oneDNN: ", e.what());
  }
  std::lock_guard lock(c.mu);
  return c.by_threads[threads].emplace(key, std::move(entry)).first->second;
}

size_t primitive_cache_size() {
  std::lock_guard lock(cache().mu);
  size_t n = 0;
  for (auto& [threads, map] : cache().by_threads) n += map.size();
  return n;
}

void reorder_into(const Tensor& src, const dnnl::memory::desc& dst_md, const std::string& dst_key, void* dst) {
  if (pack_blocked(src, dst_md, dst)) return;  // the AVX-512 matmuls' weight layouts, packed faster
  const dnnl::memory::desc src_md = md_of(src);
  KeyBuilder key("reorder");
  key.add(src);
  const CachedPrimitive& cp = cached_primitive(key.str() + dst_key, [&] {
    dnnl::reorder::primitive_desc pd(cpu_engine(), src_md, cpu_engine(), dst_md, user_scratchpad_attr());
    return std::make_pair(dnnl::primitive(dnnl::reorder(pd)), dnnl::primitive_desc_base(pd));
  });
  BOOSTER_CHECK_T(BackendError, cp.prim.has_value(), "oneDNN has no reorder from ", shape_str(src.shape()), " (",
                  dtype_name(src.dtype()), ")");
  execute(cp, {{DNNL_ARG_FROM, mem_of(src_md, src)}, {DNNL_ARG_TO, dnnl::memory(dst_md, cpu_engine(), dst)}});
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {
// This thread's scratchpad: grown to the largest a primitive asked for, kept for the next.
void* thread_scratchpad(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { ::operator delete(p, std::align_val_t(64)); }
  };
  thread_local Buffer b;
  if (bytes > b.size) {
    void* grown = ::operator new(bytes, std::align_val_t(64));  // throws before b changes
    ::operator delete(b.p, std::align_val_t(64));
    b.p = grown;
    b.size = bytes;
  }
  return b.p;
}
}  // namespace

void execute(const CachedPrimitive& cp, std::unordered_map<int, dnnl::memory> args) {
  BOOSTER_CHECK(cp.prim.has_value(), "oneDNN execute: no primitive for this case");
  const dnnl::memory::desc smd = cp.pd.scratchpad_desc();
  if (smd.get_size() > 0) args.insert_or_assign(DNNL_ARG_SCRATCHPAD, dnnl::memory(smd, cpu_engine(), thread_scratchpad(smd.get_size())));
  try {
    cp.prim->execute(cpu_stream(), args);
    cpu_stream().wait();
  } catch (const dnnl::error& e) {
    BOOSTER_THROW(BackendError, "oneDNN execute: ", e.what());
  }
}

}  // namespace booster::kernels
