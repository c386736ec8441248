// Strided row walking and the strided, converting copy behind contiguous() and copy_().
#include "core/tensor/strided.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstring>

#include "core/kernels/avx512_math.h"

namespace booster {

namespace detail {
void coalesce(Shape& shape, Shape& sa, Shape& sb) {
  Shape s2, a2, b2;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!s2.empty() && a2.back() == sa[d] * shape[d] && b2.back() == sb[d] * shape[d]) {
      s2.back() *= shape[d];
      a2.back() = sa[d];
      b2.back() = sb[d];
    } else {
      s2.push_back(shape[d]);
      a2.push_back(sa[d]);
      b2.push_back(sb[d]);
    }
  }
  shape = std::move(s2);
  sa = std::move(a2);
  sb = std::move(b2);
}
}  // namespace detail

namespace {

// A strided row between float dtypes: the dtype switch is hoisted out of the loop.
template <typename S, typename D, typename Conv>
void row_loop(const char* s, int64_t is, char* d, int64_t id, int64_t n, Conv conv) {
  const S* sp = reinterpret_cast<const S*>(s);
  D* dp = reinterpret_cast<D*>(d);
  for (int64_t i = 0; i < n; ++i) dp[i * id] = conv(sp[i * is]);
}

bool float_row(DType st, DType dt, const char* s, int64_t is, char* d, int64_t id, int64_t n) {
  if (st == DType::bf16 && dt == DType::f32) return row_loop<bf16_t, float>(s, is, d, id, n, from_bf16), true;
  if (st == DType::f32 && dt == DType::bf16) return row_loop<float, bf16_t>(s, is, d, id, n, to_bf16), true;
  if (st == DType::f16 && dt == DType::f32) return row_loop<f16_t, float>(s, is, d, id, n, from_f16), true;
  if (st == DType::f32 && dt == DType::f16) return row_loop<float, f16_t>(s, is, d, id, n, to_f16), true;
  return false;
}

// One 16 x 16 block through registers: dst[i][j] = src[j][i] for 4-byte elements, or 2-byte
// ones widened to 4 on the way in and narrowed on the way out.
BOOSTER_AVX512 void transpose_block16(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_ld);
  kernels::avx512::transpose16(r);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * dst_ld, r[i]);
}
BOOSTER_AVX512 void transpose_block16(const uint16_t* src, int64_t src_ld, uint16_t* dst, int64_t dst_ld) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_castsi512_ps(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * src_ld))));
  kernels::avx512::transpose16(r);
  for (int i = 0; i < 16; ++i)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i * dst_ld), _mm512_cvtepi32_epi16(_mm512_castps_si512(r[i])));
}

// dst[i][j] = src[j][i] for a rows x cols dst, in tiles that stay in L1 on both sides.
// A row-at-a-time gather reads one element per cache line and, with power-of-two row
// pitches, thrashes the cache sets: transposing a [1576, 3072] bf16 gradient took 23 ms
// that way (and in oneDNN's reorder), 1-2 ms in tiles. On AVX-512 the tiles' whole 16 x 16
// blocks go through registers: the [768, 3072] weight gradient of mm_tn's transposed way,
// f32 0.54 -> 0.33 ms, bf16 0.43 -> 0.145 ms (core_bench BM_TransposedCopy, 2 threads, the
// source in cache). Each tile prefetches the next one's source rows into L2 (one 64-byte
// piece of each of 32 rows, a stride the hardware prefetchers follow poorly): measured on the
// ViT-B bf16 step's turned-around weight gradients ("clone", 28 calls) 13.2 / 14.2 -> 9.8 /
// 9.5 ms (--profile, 2 pairs alternated), which the own bf16 tiles now store turned
// themselves (matmul_tn_avx512.cpp); mm_tn's other transposed ways still come through here.
// With the source in cache it costs a little (BM_TransposedCopy bf16 0.19 -> 0.20-0.22 ms,
// f32 unchanged).
template <typename T>
void transpose_tiles(const T* src, int64_t src_ld, T* dst, int64_t dst_ld, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const bool vec = kernels::avx512::cpu_ok();
  const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t t = 0; t < tr * tc; ++t) {
    const int64_t i0 = (t / tc) * kTile, j0 = (t % tc) * kTile;
    const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
    // whole 16 x 16 blocks in registers, the rest (a tile's ragged edge) element by element
    const int64_t iv = vec ? i0 + (i1 - i0) / 16 * 16 : i0, jv = vec ? j0 + (j1 - j0) / 16 * 16 : j0;
    if (t + 1 < tr * tc) {  // the next tile's source rows into L2 (see above)
      const int64_t ni0 = ((t + 1) / tc) * kTile, nj0 = ((t + 1) % tc) * kTile;
      for (int64_t j = nj0; j < std::min(cols, nj0 + kTile); ++j)
        kernels::avx512::prefetch_l2(src + j * src_ld + ni0, std::min(kTile, rows - ni0) * int64_t(sizeof(T)));
    }
    for (int64_t i = i0; i < iv; i += 16)
      for (int64_t j = j0; j < jv; j += 16)
        transpose_block16(src + j * src_ld + i, src_ld, dst + i * dst_ld + j, dst_ld);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = i < iv ? jv : j0; j < j1; ++j) dst[i * dst_ld + j] = src[j * src_ld + i];
  }
}

// The coalesced copy is a 2D transpose of same-size elements: done in tiles.
bool try_transpose(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype()) return false;
  Shape shape = dst.shape(), sd = dst.strides(), ss = src.strides();
  detail::coalesce(shape, sd, ss);
  if (shape.size() != 2 || sd[1] != 1 || ss[0] != 1 || shape[0] * shape[1] < 4096) return false;
  const size_t es = dtype_size(dst.dtype());
  if (es == 2)
    transpose_tiles(static_cast<const uint16_t*>(src.raw_data()), ss[1], static_cast<uint16_t*>(dst.raw_data()), sd[0],
                    shape[0], shape[1]);
  else if (es == 4)
    transpose_tiles(static_cast<const uint32_t*>(src.raw_data()), ss[1], static_cast<uint32_t*>(dst.raw_data()), sd[0],
                    shape[0], shape[1]);
  else
    return false;
  return true;
}

}  // namespace

void strided_copy(const Tensor& dst, const Tensor& src) {
  BOOSTER_CHECK_T(ShapeError, dst.shape() == src.shape(), "copy_: shape mismatch, destination ",
                  shape_str(dst.shape()), " vs source ", shape_str(src.shape()));
  if (try_transpose(dst, src)) return;
  const DType dt = dst.dtype(), st = src.dtype();
  const size_t des = dtype_size(dt), ses = dtype_size(st);
  auto* d = static_cast<char*>(dst.raw_data());
  auto* s = static_cast<const char*>(src.raw_data());
  for_each_row(dst.shape(), dst.strides(), src.strides(),
               [&](int64_t od, int64_t os, int64_t n, int64_t id, int64_t is) {
                 char* dr = d + od * int64_t(des);
                 const char* sr = s + os * int64_t(ses);
                 if (id == 1 && is == 1) {
                   convert(sr, st, dr, dt, n);
                 } else if (dt == st) {
                   if (des == 4) row_loop<uint32_t, uint32_t>(sr, is, dr, id, n, [](uint32_t v) { return v; });
                   else if (des == 2) row_loop<uint16_t, uint16_t>(sr, is, dr, id, n, [](uint16_t v) { return v; });
                   else for (int64_t i = 0; i < n; ++i) std::memcpy(dr + i * id * des, sr + i * is * ses, des);
                 } else if (!float_row(st, dt, sr, is, dr, id, n)) {  // integers by value, whatever their width
                   for (int64_t i = 0; i < n; ++i)
                     convert_serial(sr + i * is * int64_t(ses), st, dr + i * id * int64_t(des), dt, 1);
                 }
               });
}

bool dense_permuted(const Tensor& t) {
  std::vector<int64_t> order(size_t(t.dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  const auto& st = t.strides();
  const auto& sh = t.shape();
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return st[size_t(a)] > st[size_t(b)]; });
  int64_t expect = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = size_t(order[k]);
    if (sh[d] == 1) continue;
    if (st[d] != expect) return false;
    expect *= sh[d];
  }
  return true;
}

Tensor empty_same_layout(const Tensor& t, DType dtype) {
  if (!dense_permuted(t)) return Tensor::empty(t.shape(), dtype);
  return make_view(Tensor::empty({t.numel()}, dtype), t.shape(), t.strides(), 0);
}

namespace {
// True when the views (two or more, of one storage, one shape and one set of strides) tile
// a dense block side by side: each is rows of `run` contiguous elements (its innermost dims
// packed densely), their offsets step by `run`, and the rows' other dims pack count x run
// elements densely. Their union is then exactly [first offset, + count x numel).
bool tile_densely(std::vector<const Tensor*> vs) {
  if (vs.size() < 2) return false;
  const Tensor& f = *vs[0];
  for (const Tensor* v : vs)
    if (!v->shares_storage(f) || v->shape() != f.shape() || v->strides() != f.strides() || v->numel() == 0)
      return false;
  std::vector<size_t> order;
  for (size_t d = 0; d < size_t(f.dim()); ++d)
    if (f.shape()[d] != 1) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f.strides()[a] < f.strides()[b]; });
  int64_t run = 1;
  size_t k = 0;
  for (; k < order.size() && f.strides()[order[k]] == run; ++k) run *= f.shape()[order[k]];
  std::sort(vs.begin(), vs.end(), [](const Tensor* a, const Tensor* b) { return a->offset() < b->offset(); });
  for (size_t i = 0; i < vs.size(); ++i)
    if (vs[i]->offset() != vs[0]->offset() + int64_t(i) * run) return false;
  for (int64_t expect = run * int64_t(vs.size()); k < order.size(); expect *= f.shape()[order[k++]])
    if (f.strides()[order[k]] != expect) return false;
  return true;
}
}  // namespace

std::vector<Tensor> empty_same_layouts(const std::vector<Tensor>& views, DType dtype) {
  std::vector<const Tensor*> defined;
  for (const Tensor& v : views)
    if (v.defined()) defined.push_back(&v);
  std::vector<Tensor> out;
  out.reserve(views.size());
  if (!tile_densely(defined)) {
    for (const Tensor& v : views) out.push_back(v.defined() ? empty_same_layout(v, dtype) : Tensor());
    return out;
  }
  int64_t lo = INT64_MAX;
  for (const Tensor* v : defined) lo = std::min(lo, v->offset());
  Tensor base = Tensor::empty({int64_t(defined.size()) * defined[0]->numel()}, dtype);
  for (const Tensor& v : views)
    out.push_back(v.defined() ? make_view(base, v.shape(), v.strides(), v.offset() - lo) : Tensor());
  return out;
}

std::vector<Tensor> split_rows_owned(const Tensor& t, const std::vector<int64_t>& rows) {
  BOOSTER_CHECK(t.dim() >= 1 && t.is_contiguous(), "split_rows_owned: needs a contiguous tensor, got ", t.describe());
  const int64_t row_elems = t.numel() / std::max<int64_t>(t.size(0), 1);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t n : rows) {
    BOOSTER_CHECK(n >= 0 && start + n <= t.size(0), "split_rows_owned: blocks of ", n, " rows from row ", start,
                  " overrun ", t.describe());
    Shape shape = t.shape();
    shape[0] = n;
    char* at = static_cast<char*>(t.raw_data()) + size_t(start * row_elems) * dtype_size(t.dtype());
    out.push_back(Tensor::from_blob(at, shape, t.dtype(), [keep = t.storage()](void*) {}));
    start += n;
  }
  return out;
}

Tensor to_dtype_same_layout(const Tensor& t, DType dtype) {
  Tensor out = empty_same_layout(t, dtype);
  // A dense permuted view converts as the block it covers, in memory order.
  if (dense_permuted(t)) convert(t.raw_data(), t.dtype(), out.raw_data(), dtype, t.numel());
  else strided_copy(out, t);
  return out;
}

}  // namespace booster
