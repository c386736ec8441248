// Ring collectives (see ring_collectives.h).
#include "core/dist/ring_collectives.h"

// GCC 12 reports its own intrinsics' undefined pass-through vectors as maybe uninitialized
// once they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstdlib>

#include "core/autograd/grad_mode.h"
#include "core/common/parallel.h"
#include "core/kernels/avx512_cpu.h"
#include "core/kernels/avx512_math.h"
#include "core/kernels/raw.h"

namespace booster::dist {

namespace {

// acc = op(acc, in) over n floats; sums are also scaled (acc = (acc + in) scale).
void combine(float* acc, const float* in, int64_t n, ReduceOp op, float scale = 1.0f) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) acc[i] = (acc[i] + in[i]) * scale;
        break;
      case ReduceOp::max:
        for (int64_t i = b; i < e; ++i) acc[i] = std::max(acc[i], in[i]);
        break;
      case ReduceOp::min:
        for (int64_t i = b; i < e; ++i) acc[i] = std::min(acc[i], in[i]);
        break;
    }
  });
}

void check(int rc, const ProcessGroup& g, const char* op) {
  if (rc != MPI_SUCCESS) BOOSTER_THROW(BackendError, op, " on group '", g.name(), "' failed posting a message");
}

// Pieces of at most this many elements are widened to f32 on the stack.
constexpr int64_t kPiece = 512;

// dst = (own + in) scale over [b, e), 16 lanes at a time in f32 and rounded once into D as
// the scalar conversions round (nearest even): the same bits as sum_into's pieces.
template <typename D, typename O, typename I>
BOOSTER_AVX512 void sum_avx512(D* dst, const O* own, const I* in, int64_t b, int64_t e, float scale) {
  using namespace kernels::avx512;
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = b;
  for (; i + 16 <= e; i += 16) store16(dst + i, _mm512_mul_ps(_mm512_add_ps(load16(own + i), load16(in + i)), s));
  if (i < e) {
    const __mmask16 m = __mmask16((1u << (e - i)) - 1);
    store16(dst + i, m, _mm512_mul_ps(_mm512_add_ps(load16(own + i, m), load16(in + i, m)), s));
  }
}

bool g_avx512 = true;

// Calls f with a value of t's C++ type, for the dtypes the AVX-512 sum takes (f32, bf16).
template <typename F>
bool with_lanes_type(DType t, F&& f) {
  if (t == DType::f32) return f(float{}), true;
  if (t == DType::bf16) return f(bf16_t{}), true;
  return false;
}

// sum_into's AVX-512 form where the CPU and the dtypes allow; false where they do not.
bool sum_into_avx512(void* dst, DType dst_t, const void* own, DType own_t, const void* in, DType in_t, int64_t n,
                     float scale) {
  if (!g_avx512 || !kernels::avx512::cpu_ok()) return false;
  bool done = false;
  with_lanes_type(dst_t, [&](auto d) {
    with_lanes_type(own_t, [&](auto o) {
      with_lanes_type(in_t, [&](auto i) {
        using D = decltype(d);
        using O = decltype(o);
        using I = decltype(i);
        parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
          sum_avx512(static_cast<D*>(dst), static_cast<const O*>(own), static_cast<const I*>(in), b, e, scale);
        });
        done = true;
      });
    });
  });
  return done;
}

// dst = f(own, in) over n elements of their own float dtypes, a piece at a time through f32
// on the stack (f(x, y, len) leaves its result in x), rounded once into dst's dtype.
template <typename F>
void through_f32(void* dst, DType dst_t, const void* own, DType own_t, const void* in, DType in_t, int64_t n, F f) {
  auto at = [](const void* p, DType t, int64_t i) { return static_cast<const char*>(p) + i * int64_t(dtype_size(t)); };
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    alignas(64) float x[kPiece], y[kPiece];
    for (int64_t i = b; i < e; i += kPiece) {
      const int64_t len = std::min(kPiece, e - i);
      convert_serial(at(own, own_t, i), own_t, x, DType::f32, len);
      convert_serial(at(in, in_t, i), in_t, y, DType::f32, len);
      f(x, y, len);
      convert_serial(x, DType::f32, const_cast<char*>(at(dst, dst_t, i)), dst_t, len);
    }
  });
}

// dst = (own + in) scale over n elements, each array of its own float dtype, computed in f32
// and rounded once into dst's dtype; dst may be own. All f32 and in place: combine's loop;
// f32 and bf16 on AVX-512 CPUs: 16 lanes at a time (a bf16 all-reduce of ViT-B's 344 MB on 2
// ranks spent most of its time widening and rounding a piece at a time); else a piece at a
// time through f32 on the stack.
void sum_into(void* dst, DType dst_t, const void* own, DType own_t, const void* in, DType in_t, int64_t n,
              float scale) {
  if (dst == own && dst_t == DType::f32 && own_t == DType::f32 && in_t == DType::f32) {
    combine(static_cast<float*>(dst), static_cast<const float*>(in), n, ReduceOp::sum, scale);
    return;
  }
  if (sum_into_avx512(dst, dst_t, own, own_t, in, in_t, n, scale)) return;
  through_f32(dst, dst_t, own, own_t, in, in_t, n, [scale](float* x, const float* y, int64_t len) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) x[j] = (x[j] + y[j]) * scale;
  });
}

// dst = op(own, in) over n elements of their own float dtypes, computed in f32 and rounded
// once into dst's dtype (sums also scaled): sum_into for sums, through_f32 for max and min.
void reduce_into(void* dst, DType dst_t, const void* own, DType own_t, const void* in, DType in_t, int64_t n, ReduceOp op,
                 float scale) {
  if (op == ReduceOp::sum || op == ReduceOp::avg) return sum_into(dst, dst_t, own, own_t, in, in_t, n, scale);
  const bool max = op == ReduceOp::max;
  through_f32(dst, dst_t, own, own_t, in, in_t, n, [max](float* x, const float* y, int64_t len) {
    for (int64_t j = 0; j < len; ++j) x[j] = max ? std::max(x[j], y[j]) : std::min(x[j], y[j]);
  });
}

MPI_Datatype wire_type(DType t) { return t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

// Posts a send of send_len elements from `send` to `next` and a receive of recv_len into
// `recv` from `prev`, both of dtype t, in messages of at most max_message_elements(), into w
// (op names the collective in errors). An empty side posts nothing: both ends of a message
// know its length.
void post_exchange(Work& w, const char* op, const void* send, int64_t send_len, void* recv, int64_t recv_len, DType t,
                   int next, int prev, int tag, const ProcessGroup& g) {
  const int64_t es = int64_t(dtype_size(t));
  if (recv_len > 0)
    for_each_message(recv_len, [&](int64_t off, int cnt) {
      MPI_Request q;
      check(MPI_Irecv(static_cast<char*>(recv) + off * es, cnt, wire_type(t), prev, tag, g.comm(), &q), g, op);
      w.requests.push_back(q);
    });
  if (send_len > 0)
    for_each_message(send_len, [&](int64_t off, int cnt) {
      MPI_Request q;
      check(MPI_Isend(static_cast<const char*>(send) + off * es, cnt, wire_type(t), next, tag, g.comm(), &q), g, op);
      w.requests.push_back(q);
    });
}

// BOOSTER_RING_PIECE (elements) overrides the default, for measuring another machine.
int64_t initial_piece() {
  const char* e = std::getenv("BOOSTER_RING_PIECE");
  const long long v = e ? std::atoll(e) : 0;
  return v > 0 ? int64_t(v) : kRingPieceDefault;
}
int64_t g_piece = initial_piece();

// A reduce-scatter round moves in pieces of at most ring_piece_elements(): each piece is
// added in while it is still in cache, and the receive buffer is one piece, not a block. Every
// rank runs the same number of pieces a round (the largest block's), and piece k of a block
// exists where the block reaches past k pieces, which both ends of its message agree on.
struct Pieces {
  int64_t size, per_round;
  explicit Pieces(int64_t most)
      : size(std::clamp<int64_t>(most, 1, g_piece)), per_round(std::max<int64_t>(1, (most + size - 1) / size)) {}
  // Elements of piece k of a block of `len` elements (0 past its end).
  int64_t len(int64_t block_len, int64_t k) const { return std::clamp<int64_t>(block_len - k * size, 0, size); }
};

}  // namespace

void set_ring_piece_elements(int64_t n) {
  BOOSTER_CHECK(n > 0, "set_ring_piece_elements: need n > 0, got ", n);
  g_piece = n;
}
int64_t ring_piece_elements() { return g_piece; }
void set_ring_avx512(bool on) { g_avx512 = on; }

WorkPtr ring_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op, const ProcessGroup& g,
                            bool input_is_scratch) {
  NoGradGuard ng;
  auto w = std::make_shared<Work>("reduce_scatter", g);
  const int n = g.size(), r = g.rank();
  const int64_t c = output.numel();
  const Tensor src = input.detach().contiguous();
  const DType dt = src.dtype();
  // The partial sums of the rounds before the last (n > 2) are f32: in the input's own blocks
  // when the caller gave up a contiguous f32 input, else in one f32 block (a bf16 gradient
  // is not widened whole: that held an f32 copy of the whole input while in flight).
  const bool in_place = input_is_scratch && dt == DType::f32 && input.is_contiguous() && src.shares_storage(input);
  Tensor part = n > 2 && !in_place ? Tensor::empty({c}) : Tensor();
  const Pieces pc(c);
  Tensor recv = Tensor::empty({pc.size});  // f32 room; the first round reads it as dt
  Tensor out = output.detach().view({-1});
  char* base = static_cast<char*>(const_cast<void*>(src.raw_data()));
  char* dst_final = static_cast<char*>(out.raw_data());
  float* partial = part.defined() ? part.data<float>() : nullptr;
  const int64_t es = int64_t(dtype_size(dt));
  const int tag = g.next_collective_tag();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  const ProcessGroup* pg = &g;
  Work* wp = w.get();  // the phases belong to the Work: no reference back to it
  const auto block = [n](int64_t i) { return (i % n + n) % n; };
  // Where round s's partial sum of piece k lives (its block b's piece in place, else part).
  const auto partial_at = [=](int64_t b, int64_t k) -> void* {
    return in_place ? static_cast<void*>(base + (b * c + k * pc.size) * es) : partial + k * pc.size;
  };
  // Round s, piece k: send piece k of block r - s - 1 (this rank's own values in round 0,
  // then the partial sum it made last round), receive piece k of block r - s - 2.
  auto post = [=](int64_t t) {
    const int64_t s = t / pc.per_round, k = t % pc.per_round, len = pc.len(c, k);
    const int64_t sb = block(r - s - 1);
    const bool wide = s > 0;
    const void* from = wide ? partial_at(sb, k) : base + (sb * c + k * pc.size) * es;
    post_exchange(*wp, "reduce_scatter", from, len, recv.raw_data(), len, wide ? DType::f32 : dt, next, prev, tag, *pg);
  };
  if (n > 1) post(0);
  auto step = std::make_shared<int64_t>(0);
  // The received piece gets this rank's values; the last round's is the result, rounded once.
  w->next_phase = [=]() {
    if (n == 1) return false;
    const int64_t t = *step, s = t / pc.per_round, k = t % pc.per_round, len = pc.len(c, k);
    const int64_t rb = block(r - s - 2);
    const bool final = s == n - 2;
    const void* own = base + (rb * c + k * pc.size) * es;
    void* dst = final ? dst_final + k * pc.size * es : partial_at(rb, k);
    const float scale = final && op == ReduceOp::avg ? float(1.0 / n) : 1.0f;
    if (len > 0) reduce_into(dst, final ? dt : DType::f32, own, dt, recv.raw_data(), s > 0 ? DType::f32 : dt, len, op, scale);
    if (++*step >= (n - 1) * pc.per_round) return false;
    post(*step);
    return true;
  };
  if (n == 1) out.copy_(src.view({-1}));
  w->keep_alive = {src, part, recv, input, output, out};
  return w;
}

WorkPtr ring_all_reduce(Tensor& t, ReduceOp op, const ProcessGroup& g) {
  BOOSTER_CHECK(op == ReduceOp::sum || op == ReduceOp::avg, "ring_all_reduce: sum or avg only");
  BOOSTER_CHECK_T(DTypeError, is_floating(t.dtype()), "ring_all_reduce: needs a floating tensor, got ",
                  dtype_name(t.dtype()));
  NoGradGuard ng;
  auto w = std::make_shared<Work>("all_reduce", g);
  const int n = g.size();
  if (n == 1) return w;  // completes at its first test or wait
  const int r = g.rank(), next = (r + 1) % n, prev = (r - 1 + n) % n;
  const DType dt = t.dtype();
  const bool low = dt != DType::f32;
  Tensor flat = t.detach().view({-1});
  const int64_t c = flat.numel();
  // Block i (taken mod n) is elements [c i / n, c (i + 1) / n).
  auto begin = [c, n](int64_t i) { return c * ((i % n + n) % n) / n; };
  auto length = [c, n, begin](int64_t i) {
    const int64_t j = (i % n + n) % n;
    return c * (j + 1) / n - begin(j);
  };
  const int64_t most = (c + n - 1) / n;
  const Pieces pc(most);
  Tensor recv = Tensor::empty({pc.size});  // f32 room; the first round reads it as dt
  Tensor part = low && n > 2 ? Tensor::empty({most}) : Tensor();  // a bf16/f16 block's partial sum
  char* base = static_cast<char*>(flat.raw_data());
  const int64_t es = int64_t(dtype_size(dt));
  const int tag = g.next_collective_tag();
  const ProcessGroup* pg = &g;
  Work* wp = w.get();  // the phases belong to the Work: no reference back to it
  const int64_t rs_steps = (n - 1) * pc.per_round, steps = rs_steps + n - 1;
  // Step t < rs_steps is piece k of reduce-scatter round s (t = s per_round + k): send piece
  // k of block r - s (a rank's own values, then the partial sum it made last round), receive
  // piece k of block r - s - 1 and add this rank's values to it. Step t >= rs_steps is
  // all-gather round a = t - rs_steps: send the whole block r + 1 - a, receive r - a.
  auto post = [=](int64_t t) {
    const auto addr = [&](int64_t i) { return base + begin(i) * es; };
    if (t < rs_steps) {
      const int64_t s = t / pc.per_round, k = t % pc.per_round, sb = r - s, rb = r - s - 1;
      const bool wide = low && s > 0;  // partial sums of a bf16/f16 tensor move as f32
      const void* src = wide ? static_cast<const void*>(part.data<float>() + k * pc.size) : addr(sb) + k * pc.size * es;
      post_exchange(*wp, "all_reduce", src, pc.len(length(sb), k), recv.raw_data(), pc.len(length(rb), k),
                    wide ? DType::f32 : dt, next, prev, tag, *pg);
      return;
    }
    const int64_t a = t - rs_steps;
    post_exchange(*wp, "all_reduce", addr(r + 1 - a), length(r + 1 - a), addr(r - a), length(r - a), dt, next, prev,
                  tag, *pg);
  };
  auto step = std::make_shared<int64_t>(0);
  post(0);
  w->next_phase = [=]() {
    const int64_t t = *step;
    if (t < rs_steps) {  // the received piece gets this rank's values; the last round's is final
      const int64_t s = t / pc.per_round, k = t % pc.per_round, rb = r - s - 1, len = pc.len(length(rb), k);
      const bool final = s == n - 2;
      void* own = base + (begin(rb) + k * pc.size) * es;
      void* dst = final || !low ? own : static_cast<void*>(part.data<float>() + k * pc.size);
      const DType in_t = low && s > 0 ? DType::f32 : dt;
      const DType dst_t = final || !low ? dt : DType::f32;
      const float scale = final && op == ReduceOp::avg ? float(1.0 / n) : 1.0f;
      if (len > 0) sum_into(dst, dst_t, own, dt, recv.raw_data(), in_t, len, scale);
    }
    if (++*step >= steps) return false;
    post(*step);
    return true;
  };
  w->keep_alive = {t, flat, recv, part};
  return w;
}

void RingShift::wait() {
  for (auto& w : works) w->wait();
}

RingShift ring_shift(const Tensor& mine, const ProcessGroup& g, int tag) {
  const int n = g.size(), r = g.rank();
  RingShift s{Tensor::empty(mine.shape(), mine.dtype()), {}};
  s.works.push_back(recv(s.incoming, g.ranks()[size_t((r + n - 1) % n)], tag, g, true));
  s.works.push_back(send(mine, g.ranks()[size_t((r + 1) % n)], tag, g, true));
  return s;
}

}  // namespace booster::dist
