// Dtype names and bulk conversion loops (vectorized, OpenMP for large buffers).
#include "core/common/dtype.h"

#include <immintrin.h>

#include "core/common/check.h"

namespace booster {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "F32" || name == "fp32") return DType::f32;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::bf16;
  if (name == "f16" || name == "float16" || name == "F16" || name == "fp16") return DType::f16;
  if (name == "i64" || name == "int64" || name == "I64") return DType::i64;
  if (name == "i32" || name == "int32" || name == "I32") return DType::i32;
  if (name == "u8" || name == "uint8" || name == "U8") return DType::u8;
  BOOSTER_THROW(DTypeError, "unknown dtype '", name, "' (expected f32, bf16, f16, i64, i32 or u8)");
}

f16_t to_f16(float f) {
  return f16_t{uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
}
float from_f16(f16_t h) { return _cvtsh_ss(h.bits); }

double load_element(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return from_bf16(static_cast<const bf16_t*>(p)[i]);
    case DType::f16: return from_f16(static_cast<const f16_t*>(p)[i]);
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
  }
  return 0;
}

namespace {

inline void store_from_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::bf16: static_cast<bf16_t*>(p)[i] = to_bf16(float(v)); break;
    case DType::f16: static_cast<f16_t*>(p)[i] = to_f16(float(v)); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
  }
}

void f32_to_f16(const float* s, f16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < n; ++i) d[i] = to_f16(s[i]);
}
void f16_to_f32(const f16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = from_f16(s[i]);
}

}  // namespace

void convert_serial(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, size_t(n) * dtype_size(st));
  } else if (st == DType::f32 && dt == DType::bf16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<bf16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = to_bf16(s[i]);
  } else if (st == DType::bf16 && dt == DType::f32) {
    auto* s = static_cast<const bf16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = from_bf16(s[i]);
  } else if (st == DType::f32 && dt == DType::f16) {
    f32_to_f16(static_cast<const float*>(src), static_cast<f16_t*>(dst), n);
  } else if (st == DType::f16 && dt == DType::f32) {
    f16_to_f32(static_cast<const f16_t*>(src), static_cast<float*>(dst), n);
  } else {
    for (int64_t i = 0; i < n; ++i) store_from_double(dst, dt, i, load_element(src, st, i));
  }
}

void convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;
  if (st == dt) {
    std::memcpy(dst, src, size_t(n) * dtype_size(st));
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const size_t ss = dtype_size(st), ds = dtype_size(dt);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
    convert_serial(static_cast<const char*>(src) + size_t(b) * ss, st, static_cast<char*>(dst) + size_t(b) * ds, dt, e - b);
  }
}

}  // namespace booster
