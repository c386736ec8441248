// oneDNN plumbing: the engine and stream, tensor -> memory descriptors, and a cache of
// primitives keyed by op, shapes, strides and dtypes so each is created once.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/tensor/tensor.h"

namespace booster::kernels {

/// The CPU engine.
dnnl::engine& cpu_engine();
/// The stream all primitives run on (in order).
dnnl::stream& cpu_stream();

/// oneDNN data type of a dtype.
dnnl::memory::data_type dnnl_type(DType t);
/// Descriptor with the tensor's dims and strides.
dnnl::memory::desc md_of(const Tensor& t);
/// Descriptor with explicit dims/strides and dtype.
dnnl::memory::desc md_of(const Shape& dims, const Shape& strides, DType t);
/// Memory object over the tensor's data (no copy).
dnnl::memory mem_of(const dnnl::memory::desc& md, const Tensor& t);

/// Builds a cache key from op name, numbers and tensor layouts.
class KeyBuilder {
 public:
  explicit KeyBuilder(const char* op) : key_(op) {}
  KeyBuilder& add(int64_t v) {
    key_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  KeyBuilder& add(double v) {
    key_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  KeyBuilder& add(const Tensor& t);
  const std::string& str() const { return key_; }

 private:
  std::string key_;
};

/// A cached primitive with its descriptor; empty `prim` means oneDNN has no implementation
/// for this case (the caller falls back to f32 compute).
struct CachedPrimitive {
  std::optional<dnnl::primitive> prim;
  dnnl::primitive_desc_base pd;
  std::string impl;  // oneDNN's implementation name, e.g. "brg:avx512_core_amx"
  /// True when oneDNN has an optimized (not its reference) kernel for this case.
  bool native() const { return prim.has_value() && impl.rfind("ref", 0) != 0; }
};

/// Returns the cached primitive for `key`, creating it with `make` on first use. A
/// dnnl::error from `make` with status unimplemented caches "unsupported".
const CachedPrimitive& cached_primitive(const std::string& key,
                                        const std::function<std::pair<dnnl::primitive, dnnl::primitive_desc_base>()>& make);
/// Number of primitives in the cache (for tests).
size_t primitive_cache_size();

/// Copies src's values into dst's memory (same dims; any strides or a oneDNN blocked
/// layout) with a oneDNN reorder cached under `dst_key`, which must name dst_md.
void reorder_into(const Tensor& src, const dnnl::memory::desc& dst_md, const std::string& dst_key, void* dst);

/// Attributes every cached primitive is created with (the scratchpad in the user's hands): oneDNN 2.x's library scratchpad is one buffer for the whole process, so
/// two threads running primitives at once (threads that each run their own share of a batch)
/// would overwrite each other's. execute() hands each thread its own.
dnnl::primitive_attr user_scratchpad_attr();

/// Executes a cached primitive with arguments, on this thread's scratchpad, and waits.
void execute(const CachedPrimitive& cp, std::unordered_map<int, dnnl::memory> args);

}  // namespace booster::kernels
