// Element types and the conversions between float formats (bf16 rounds to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace booster {

enum class DType : uint8_t { f32, bf16, f16, i64, u8, i32 };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}
/// True for f32, bf16 and f16.
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
/// True for the dtypes token ids, class labels and indices come in: i64 and i32.
constexpr bool is_index(DType t) { return t == DType::i64 || t == DType::i32; }
/// Name as in safetensors / PyTorch ("f32", "bf16", ...).
const char* dtype_name(DType t);
/// Parses a dtype name ("f32", "float32", "bf16", "bfloat16", ...); throws DTypeError.
DType dtype_from_name(const std::string& name);

/// bfloat16 storage: the upper 16 bits of an f32.
struct bf16_t { uint16_t bits; };
/// IEEE half storage.
struct f16_t { uint16_t bits; };

/// f32 -> bf16 with round-to-nearest-even; NaN stays NaN.
inline bf16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{uint16_t(u >> 16)};
}
/// bf16 -> f32 (exact).
inline float from_bf16(bf16_t b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// f32 -> f16 with round-to-nearest-even (hardware F16C).
f16_t to_f16(float f);
/// f16 -> f32 (exact).
float from_f16(f16_t h);

/// Element i of a buffer of dtype t, as double (exact but for i64 beyond 2^53).
double load_element(const void* p, DType t, int64_t i);

/// Converts n elements between any two dtypes (floats through f32; ints by value).
void convert(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);
/// The same on the calling thread only (for blocks inside a parallel loop).
void convert_serial(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);

/// Maps a C++ element type to its DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<bf16_t> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16_t> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };

}  // namespace booster
