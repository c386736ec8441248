// Every collective x dtype x blocking/async against values computed locally. Rank r
// contributes value(r, i) = (r + 1) * (i % 7 + 1).
#include <gtest/gtest.h>
#include <chrono>
#include <climits>

#include "core/dist/collectives.h"
#include "core/dist/ring_collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"

using namespace booster;
using namespace booster::dist;

namespace {

double value(int r, int64_t i) { return (r + 1) * double(i % 7 + 1); }  // exact in every dtype

Tensor make(int r, int64_t n, DType dt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(value(r, i));
  return Tensor::from_vector(v, {n}).to(dt);
}

struct Param {
  DType dtype;
  bool async_op;
};

class Collectives : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {  // async also splits messages, and a ring's rounds into pieces
    set_max_message_elements(GetParam().async_op ? 7 : INT_MAX);
    set_ring_piece_elements(GetParam().async_op ? 5 : kRingPieceDefault);
  }
  void TearDown() override {
    set_max_message_elements(INT_MAX);
    set_ring_piece_elements(kRingPieceDefault);
  }
  int me = world_rank(), n = world_size();
  const int64_t len = 29;
};

void expect_values(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  auto v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], float(want(int64_t(i)))) << what << " element " << i;
}

// op over the ranks' value(r, at).
double reduced(ReduceOp op, int n, int64_t at) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += value(r, at);
  if (op == ReduceOp::avg) return s / n;
  if (op == ReduceOp::max) return value(n - 1, at);
  if (op == ReduceOp::min) return value(0, at);
  return s;
}

TEST_P(Collectives, AllReduce) {
  const auto [dt, async] = GetParam();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    if (op == ReduceOp::avg && !is_floating(dt)) continue;
    Tensor t = make(me, len, dt);
    auto w = all_reduce(t, op, ProcessGroup::world(), async);
    w->wait();
    EXPECT_TRUE(w->is_completed());
    expect_values(t, [&](int64_t i) { return reduced(op, n, i); }, "all_reduce");
  }
}

TEST_P(Collectives, AllReduceCoalesced) {
  const auto [dt, async] = GetParam();
  if (dt == DType::u8) return;
  std::vector<Tensor> ts{make(me, 5, dt), make(me, 12, dt).view({3, 4}), make(me, 1, dt)};
  all_reduce_coalesced(ts, ReduceOp::sum, ProcessGroup::world(), async)->wait();
  for (auto& t : ts)
    expect_values(t.view({-1}), [&](int64_t i) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += value(r, i);
      return s;
    }, "coalesced");
}

TEST_P(Collectives, ReduceScatterAndAllGather) {
  const auto [dt, async] = GetParam();
  Tensor in = make(me, len * n, dt), out = Tensor::empty({len}, dt);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    if (op != ReduceOp::sum && !is_floating(dt)) continue;
    reduce_scatter(out, in, op, ProcessGroup::world(), async)->wait();
    expect_values(out, [&](int64_t i) { return reduced(op, n, me * len + i); }, "reduce_scatter");
  }
  // The input given up as scratch (reduced in place where it is an fp32 buffer): the same
  // sums; without that, the input is left as it was.
  Tensor scratch = in.clone(), out2 = Tensor::empty({len}, dt);
  reduce_scatter(out2, scratch, ReduceOp::sum, ProcessGroup::world(), async, /*input_is_scratch=*/true)->wait();
  expect_values(out2, [&](int64_t i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += value(r, me * len + i);
    return s;
  }, "reduce_scatter of a scratch input");
  expect_values(in, [&](int64_t i) { return value(me, i); }, "reduce_scatter's input");
  Tensor mine = make(me, len, dt), all = Tensor::empty({n, len}, dt);
  all_gather(all, mine, ProcessGroup::world(), async)->wait();
  expect_values(all.view({-1}), [&](int64_t i) { return value(int(i / len), i % len); }, "all_gather");
  std::vector<Tensor> list;
  for (int r = 0; r < n; ++r) list.push_back(Tensor::empty({len}, dt));
  all_gather(list, mine, ProcessGroup::world(), async)->wait();
  for (int r = 0; r < n; ++r) expect_values(list[size_t(r)], [&](int64_t i) { return value(r, i); }, "all_gather list");
}

// A bf16 reduce-scatter holds no f32 copy of its input while in flight: beside the output,
// one f32 piece to receive into, and with more than 2 ranks one f32 block of partial sums.
TEST(CollectivesMemory, Bf16ReduceScatterDoesNotWidenItsInput) {
  const int n = world_size(), me = world_rank();
  const int64_t c = int64_t(1) << 18;
  Tensor in = make(me, c * n, DType::bf16), out = Tensor::empty({c}, DType::bf16);
  const size_t before = host_tier().bytes_in_use();
  host_tier().reset_peak();
  auto w = reduce_scatter(out, in, ReduceOp::avg, ProcessGroup::world(), /*async_op=*/true);
  w->wait();
  const size_t extra = host_tier().peak_bytes() - before;
  const size_t most = size_t(std::min(c, ring_piece_elements())) * 4 + (n > 2 ? size_t(c) * 4 : 0);
  EXPECT_LE(extra, most) << "a bf16 reduce-scatter of " << in.nbytes() << " bytes held " << extra << " bytes more";
  expect_values(out.narrow(0, 0, 64), [&](int64_t i) { return reduced(ReduceOp::avg, n, me * c + i); }, "reduce_scatter");
}

TEST_P(Collectives, BroadcastReduceSendRecv) {
  const auto [dt, async] = GetParam();
  const int src = n - 1;
  Tensor t = make(me, len, dt);
  broadcast(t, src, ProcessGroup::world(), async)->wait();
  expect_values(t, [&](int64_t i) { return value(src, i); }, "broadcast");
  Tensor s = make(me, len, dt);
  reduce(s, 0, ReduceOp::sum, ProcessGroup::world(), async)->wait();
  expect_values(s, [&](int64_t i) {
    if (me != 0) return value(me, i);
    double acc = 0;
    for (int r = 0; r < n; ++r) acc += value(r, i);
    return acc;
  }, "reduce");
  if (n < 2) return;
  // A ring: each rank sends to the next, receives from the previous.
  Tensor out = make(me, len, dt), in = Tensor::empty({len}, dt);
  auto ws = send(out, (me + 1) % n, 3, ProcessGroup::world(), true);
  recv(in, (me + n - 1) % n, 3, ProcessGroup::world(), async)->wait();
  ws->wait();
  expect_values(in, [&](int64_t i) { return value((me + n - 1) % n, i); }, "recv");
  barrier(ProcessGroup::world(), async)->wait();
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, Collectives,
                         ::testing::Values(Param{DType::f32, false}, Param{DType::f32, true}, Param{DType::bf16, false},
                                           Param{DType::bf16, true}, Param{DType::f16, false}, Param{DType::f16, true},
                                           Param{DType::i64, false}, Param{DType::i64, true}, Param{DType::i32, false},
                                           Param{DType::i32, true}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype)) + (info.param.async_op ? "_async" : "_blocking");
                         });

TEST(CollectivesErrors, ClearMessages) {
  Tensor t = Tensor::zeros({4, 4});
  Tensor tr = t.transpose(0, 1);
  EXPECT_THROW(all_reduce(tr), ValueError);
  Tensor i = Tensor::zeros({4}, DType::i64);
  EXPECT_THROW(all_reduce(i, ReduceOp::avg), DTypeError);
  Tensor out = Tensor::empty({3});
  EXPECT_THROW(reduce_scatter(out, Tensor::zeros({3 * world_size() + 1})), ShapeError);
  EXPECT_THROW(broadcast(t, world_size()), ValueError);  // not a member
}

TEST(CollectivesSum, Bf16AccumulatesInF32) {
  // 256 + 1 + ... : in bf16 arithmetic 256 + 1 rounds back to 256; in f32 it does not.
  Tensor t = Tensor::from_vector({world_rank() == 0 ? 256.f : 1.f}, {1}, DType::bf16);
  all_reduce(t);
  const float expect = world_size() == 1 ? 256.f : from_bf16(to_bf16(256.f + float(world_size() - 1)));
  EXPECT_EQ(t.to_vector()[0], expect);
}

// Low-precision sums go round the ring with f32 partial sums and one rounding at the end:
// rank r holds about k (1 + r 2^-7), whose sum over n ranks needs more bits than bf16 keeps,
// so rounding a partial sum on the way (bf16 arithmetic) would lose them. Every rank must
// end with the same bits: the exact sum of the inputs (as their dtype holds them), rounded once.
TEST(CollectivesSum, LowPrecisionSumsRoundOnce) {
  const int n = world_size(), me = world_rank();
  const int64_t len = 1001;  // blocks of unequal length on 2, 3 and 4 ranks
  // Rounds whole, and in pieces of 64 (the blocks' last pieces of unequal length too); sums
  // 16 lanes at a time (AVX-512 CPUs) and on the portable path.
  for (int64_t piece : {kRingPieceDefault, int64_t(64), int64_t(0)}) {
    set_ring_avx512(piece != 0);
    set_ring_piece_elements(piece != 0 ? piece : 64);
    for (DType dt : {DType::bf16, DType::f16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<float> v(static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i) v[size_t(i)] = float(i % 5 + 1) * (1.f + float(me) / 128.f);
        Tensor t = Tensor::from_vector(v, {len}).to(dt);
        Tensor inputs = Tensor::empty({n * len}, dt), outputs = Tensor::empty({n * len}, dt);
        all_gather(inputs, t);
        all_reduce(t, op);
        all_gather(outputs, t);
        auto in = inputs.to_vector(), got = outputs.to_vector();
        for (int64_t i = 0; i < len; ++i) {
          double exact = 0;
          for (int r = 0; r < n; ++r) exact += double(in[size_t(r * len + i)]);
          float sum = float(exact);  // exact in f32 here; avg scales by 1/n in f32, as all_reduce does
          if (op == ReduceOp::avg) sum *= float(1.0 / n);
          const float want = Tensor::from_vector({sum}, {1}).to(dt).to_vector()[0];
          for (int r = 0; r < n; ++r)
            ASSERT_EQ(got[size_t(r * len + i)], want) << dtype_name(dt) << (op == ReduceOp::avg ? " avg" : " sum")
                                                      << " element " << i << " on rank " << r << ", pieces of " << piece
                                                      << (piece == 0 ? " (64, without AVX-512)" : "");
        }
      }
    }
  }
  set_ring_piece_elements(kRingPieceDefault);
  set_ring_avx512(true);
}

// f32 tensors of 64 Ki elements and more go round the ring too (smaller ones stay on MPI):
// sums and averages of values exact in f32, the same on every rank, in blocking and async
// calls, whole and in messages split below MPI's limit, and in the ring's pieces (4099 and
// the default, larger than a block).
TEST(CollectivesSum, LargeF32GoesRoundTheRing) {
  const int64_t len = (int64_t(1) << 16) + 37;
  for (int64_t max_elems : {int64_t(INT_MAX), int64_t(5000)}) {
    set_max_message_elements(max_elems);
    set_ring_piece_elements(max_elems == INT_MAX ? kRingPieceDefault : 4099);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (bool async : {false, true}) {
        Tensor t = make(world_rank(), len, DType::f32);
        all_reduce(t, op, ProcessGroup::world(), async)->wait();
        expect_values(t, [&](int64_t i) {
          double s = 0;
          for (int r = 0; r < world_size(); ++r) s += value(r, i);
          return op == ReduceOp::avg ? double(float(s) * float(1.0 / world_size())) : s;
        }, std::string("f32 ring ") + (op == ReduceOp::avg ? "avg" : "sum") + (async ? " async" : " blocking"));
      }
  }
  set_max_message_elements(INT_MAX);
  set_ring_piece_elements(kRingPieceDefault);
}

// An asynchronous ring all-reduce completes under test() alone (DDP's reducer tests its
// buckets between gradients and waits only at the end), also in messages split below MPI's limit.
TEST(CollectivesAsync, RingAdvancesUnderTest) {
  set_max_message_elements(100);
  const int64_t len = 997;
  Tensor t = make(world_rank(), len, DType::bf16);
  auto w = all_reduce(t, ReduceOp::sum, ProcessGroup::world(), true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!w->test()) ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "test() never completed the all-reduce";
  set_max_message_elements(INT_MAX);
  EXPECT_TRUE(w->is_completed());
  expect_values(t, [&](int64_t i) {
    double s = 0;
    for (int r = 0; r < world_size(); ++r) s += value(r, i);
    return s;
  }, "all_reduce under test()");
}

}  // namespace
