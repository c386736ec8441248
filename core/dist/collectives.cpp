// Collectives (see collectives.h). Every call posts non-blocking MPI operations, one per
// chunk of at most max_message_elements(), into a Work; blocking calls wait at once.
// Floating sums (bf16/f16 always, f32 from 64 Ki elements) go round a ring with f32 sums
// (ring_collectives.h); bf16/f16 max/min and reduce go through an f32 staging buffer; other
// transfers move raw bits.
#include "core/dist/collectives.h"

#include <atomic>

#include <climits>
#include <cstring>

#include "core/dist/ring_collectives.h"
#include "core/dist/watchdog.h"
#include "core/kernels/raw.h"

namespace booster::dist {

namespace {

int64_t g_max_elems = INT_MAX;

void mpi_check(int rc, const char* op, const ProcessGroup& g) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  BOOSTER_THROW(BackendError, op, " on group '", g.name(), "' failed: ", std::string(msg, size_t(len)));
}

MPI_Datatype raw_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i32: return MPI_INT32_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

void check_tensor(const char* op, const Tensor& t) {
  BOOSTER_CHECK(t.defined(), op, ": tensor is undefined");
  BOOSTER_CHECK(t.is_contiguous(), op, ": tensor ", t.describe(), " must be contiguous");
}

void check_reduce(const char* op, const Tensor& t, ReduceOp r) {
  BOOSTER_CHECK_T(DTypeError, r != ReduceOp::avg || is_floating(t.dtype()), op,
                  ": avg needs a floating tensor, got ", dtype_name(t.dtype()));
}

bool needs_staging(DType t) { return t == DType::bf16 || t == DType::f16; }

void* at(const Tensor& t, int64_t off) { return static_cast<char*>(t.raw_data()) + off * int64_t(dtype_size(t.dtype())); }

// Elements [off, off + len) of a flat tensor, as a view.
Tensor piece(const Tensor& t, int64_t off, int64_t len) { return t.detach().view({-1}).narrow(0, off, len); }

// Posts one non-blocking operation per chunk of buf into w: post(address, count, request)
// returns MPI's error code.
template <typename Post>
void post_chunks(Work& w, const Tensor& buf, const char* op, const ProcessGroup& g, Post&& post) {
  for_each_message(buf.numel(), [&](int64_t off, int count) {
    MPI_Request r;
    mpi_check(post(at(buf, off), count, &r), op, g);
    w.requests.push_back(r);
  });
}

WorkPtr finish(WorkPtr w, bool async_op) {
  if (!async_op) w->wait();
  return w;
}

std::atomic<int64_t> g_traffic{0};

// Counts a collective's bytes per rank: `share` of N (see traffic_bytes).
void note(const Tensor& t, const ProcessGroup& g, double share) {
  if (g.size() > 1) g_traffic += int64_t(share * double(t.numel() * int64_t(dtype_size(t.dtype()))));
}
double ring(const ProcessGroup& g) { return double(g.size() - 1) / g.size(); }

}  // namespace

int64_t traffic_bytes() { return g_traffic.load(); }
void reset_traffic() { g_traffic = 0; }

void set_max_message_elements(int64_t n) {
  BOOSTER_CHECK(n > 0 && n <= INT_MAX, "set_max_message_elements: need 0 < n <= INT_MAX");
  g_max_elems = n;
}
int64_t max_message_elements() { return g_max_elems; }

void for_each_message(int64_t n, const std::function<void(int64_t, int)>& post) {
  for (int64_t off = 0; off < n || (n == 0 && off == 0); off += g_max_elems) {
    post(off, int(std::min<int64_t>(g_max_elems, n - off)));
    if (n == 0) break;
  }
}

Work::Work(std::string op, const ProcessGroup& g) : op_(std::move(op)), group_(g.name()) {
  token_ = Watchdog::instance().enter(op_, group_);
}

Work::~Work() {
  if (done_) return;
  try {
    wait();
  } catch (...) {
  }
}

void Work::wait() {
  while (!done_) {
    const int rc = requests.empty() ? MPI_SUCCESS
                                    : MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    BOOSTER_CHECK_T(BackendError, rc == MPI_SUCCESS, op_, " on group '", group_, "' failed while waiting");
    requests.clear();
    if (!next_phase || !next_phase()) complete();
  }
}

bool Work::test() {
  while (!done_) {
    int flag = 1;
    if (!requests.empty()) {
      const int rc = MPI_Testall(int(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
      BOOSTER_CHECK_T(BackendError, rc == MPI_SUCCESS, op_, " on group '", group_, "' failed");
    }
    if (!flag) return false;
    requests.clear();
    if (!next_phase || !next_phase()) complete();
  }
  return true;
}

void Work::complete() {
  Watchdog::instance().leave(token_);
  done_ = true;
  if (on_complete) on_complete();
  keep_alive.clear();
}

WorkPtr all_reduce(Tensor& t, ReduceOp op, const ProcessGroup& g, bool async_op) {
  note(t, g, 2 * ring(g));
  check_tensor("all_reduce", t);
  check_reduce("all_reduce", t, op);
  // Floating sums go round a ring of point-to-point messages (ring_collectives.h): bf16/f16
  // in their own dtype with f32 sums, instead of an f32 staging copy through MPI, and f32 of
  // 64 Ki elements or more, instead of MPI_Iallreduce (libnbc), which the ring outran while
  // keeping the overlap. bench/allreduce_bench, 2 ranks of one thread, ring against
  // MPI_Iallreduce + wait / blocking MPI_Allreduce: 25 MB bf16 5.3 ms against 262 / 163
  // (staged); 1.2 MB bf16 0.44 against 1.36 / 0.70; 25 MB f32 5.0 against 16.2 / 4.6; 1.2 MB
  // f32 0.35 against 0.65 / 0.34. At 0.25 MB f32 the ring and MPI were equal, so smaller f32
  // tensors keep MPI's latency-bound algorithms.
  constexpr int64_t kRingMinF32 = int64_t(1) << 16;
  if ((op == ReduceOp::sum || op == ReduceOp::avg) &&
      (needs_staging(t.dtype()) || (t.dtype() == DType::f32 && t.numel() >= kRingMinF32)))
    return finish(ring_all_reduce(t, op, g), async_op);
  auto w = std::make_shared<Work>("all_reduce", g);
  const bool staged = needs_staging(t.dtype());
  Tensor buf = staged ? t.detach().to(DType::f32) : t.detach();
  post_chunks(*w, buf, "all_reduce", g, [&](void* p, int count, MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, p, count, raw_type(buf.dtype()), mpi_op(op), g.comm(), r);
  });
  w->keep_alive = {t, buf};
  Tensor target = t;
  const int n = g.size();
  w->on_complete = [target, buf, staged, op, n]() mutable {
    if (op == ReduceOp::avg) kernels::scale_(buf, 1.0 / n);
    if (staged) target.detach().copy_(buf);
  };
  return finish(w, async_op);
}

WorkPtr all_reduce_coalesced(std::vector<Tensor>& ts, ReduceOp op, const ProcessGroup& g, bool async_op) {
  BOOSTER_CHECK(!ts.empty(), "all_reduce_coalesced: no tensors");
  int64_t total = 0;
  for (auto& t : ts) {
    check_tensor("all_reduce_coalesced", t);
    check_reduce("all_reduce_coalesced", t, op);
    BOOSTER_CHECK_T(DTypeError, is_floating(t.dtype()) == is_floating(ts[0].dtype()),
                    "all_reduce_coalesced: mixes floating and integer tensors");
    total += t.numel();
  }
  const DType flat_t = is_floating(ts[0].dtype()) ? DType::f32 : DType::i64;
  Tensor flat = Tensor::empty({total}, flat_t);
  int64_t off = 0;
  for (auto& t : ts) {
    piece(flat, off, t.numel()).copy_(t.detach().view({-1}));
    off += t.numel();
  }
  WorkPtr w = all_reduce(flat, op, g, true);
  auto inner = w->on_complete;
  std::vector<Tensor> targets = ts;
  w->on_complete = [inner, flat, targets]() mutable {
    if (inner) inner();
    int64_t o = 0;
    for (auto& t : targets) {
      t.detach().view({-1}).copy_(piece(flat, o, t.numel()));
      o += t.numel();
    }
  };
  return finish(w, async_op);
}

WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op, const ProcessGroup& g, bool async_op,
                       bool input_is_scratch) {
  note(input, g, ring(g));
  check_tensor("reduce_scatter", output);
  check_tensor("reduce_scatter", input);
  check_reduce("reduce_scatter", input, op);
  const int n = g.size();
  const int64_t c = output.numel();
  BOOSTER_CHECK_T(ShapeError, input.numel() == c * n && input.dtype() == output.dtype(), "reduce_scatter: input ",
                  input.describe(), " must hold ", n, " blocks of output ", output.describe());
  // Open MPI's non-blocking reduce-scatter (libnbc) ran 4x slower than its blocking one and
  // than all-reduce (73 vs 18 and 24 ms for 2 x 2.7 M floats on 2 ranks): floating tensors
  // go round a ring of point-to-point messages instead (ring_collectives.cpp).
  if (is_floating(input.dtype()))
    return finish(ring_reduce_scatter(output, input, op, g, input_is_scratch), async_op);
  auto w = std::make_shared<Work>("reduce_scatter", g);
  std::vector<std::function<void()>> finishers;
  // Integers: each piece of the block is staged as [n][len] so it can be split below MPI's limit.
  for (int64_t off = 0; off < c || (c == 0 && off == 0); off += g_max_elems) {
    const int64_t len = std::min<int64_t>(g_max_elems, c - off);
    Tensor in_stage = Tensor::empty({n, len}, input.dtype()), out_stage = Tensor::empty({len}, input.dtype());
    for (int r = 0; r < n; ++r) in_stage.select(0, r).copy_(piece(input, int64_t(r) * c + off, len));
    MPI_Request req;
    mpi_check(MPI_Ireduce_scatter_block(in_stage.raw_data(), out_stage.raw_data(), int(len), raw_type(input.dtype()),
                                        mpi_op(op), g.comm(), &req),
              "reduce_scatter", g);
    w->requests.push_back(req);
    w->keep_alive.push_back(in_stage);
    Tensor out = output;
    finishers.push_back([out, out_stage, off, len]() mutable { piece(out, off, len).copy_(out_stage); });
    if (c == 0) break;
  }
  w->on_complete = [finishers] {
    for (auto& f : finishers) f();
  };
  return finish(w, async_op);
}

WorkPtr all_gather(Tensor& output, const Tensor& input, const ProcessGroup& g, bool async_op) {
  note(input, g, g.size() - 1);
  check_tensor("all_gather", output);
  check_tensor("all_gather", input);
  const int n = g.size();
  const int64_t c = input.numel();
  BOOSTER_CHECK_T(ShapeError, output.numel() == c * n && input.dtype() == output.dtype(), "all_gather: output ",
                  output.describe(), " must hold ", n, " copies of input ", input.describe());
  auto w = std::make_shared<Work>("all_gather", g);
  std::vector<std::function<void()>> finishers;
  for (int64_t off = 0; off < c || (c == 0 && off == 0); off += g_max_elems) {
    const int64_t len = std::min<int64_t>(g_max_elems, c - off);
    Tensor in = piece(input, off, len).contiguous();
    // In one piece the [n][len] blocks are the output itself: no staging buffer, no copy.
    const bool direct = len == c;
    Tensor out_stage = direct ? output : Tensor::empty({n, len}, input.dtype());
    MPI_Request req;
    mpi_check(MPI_Iallgather(in.raw_data(), int(len), raw_type(input.dtype()), out_stage.raw_data(), int(len),
                             raw_type(input.dtype()), g.comm(), &req),
              "all_gather", g);
    w->requests.push_back(req);
    w->keep_alive.push_back(in);
    w->keep_alive.push_back(out_stage);
    if (direct) break;
    Tensor out = output;
    finishers.push_back([out, out_stage, off, len, n, c]() mutable {
      for (int r = 0; r < n; ++r) piece(out, int64_t(r) * c + off, len).copy_(out_stage.select(0, r));
    });
    if (c == 0) break;
  }
  w->on_complete = [finishers] {
    for (auto& f : finishers) f();
  };
  return finish(w, async_op);
}

WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input, const ProcessGroup& g, bool async_op) {
  BOOSTER_CHECK_T(ShapeError, int(outputs.size()) == g.size(), "all_gather: ", outputs.size(), " outputs for a group of ",
                  g.size());
  for (auto& o : outputs)
    BOOSTER_CHECK_T(ShapeError, o.numel() == input.numel() && o.dtype() == input.dtype(), "all_gather: output ",
                    o.describe(), " does not match input ", input.describe());
  Tensor flat = Tensor::empty({g.size() * input.numel()}, input.dtype());
  WorkPtr w = all_gather(flat, input, g, true);
  auto inner = w->on_complete;
  std::vector<Tensor> targets = outputs;
  const int64_t c = input.numel();
  w->on_complete = [inner, flat, targets, c]() mutable {
    if (inner) inner();
    for (size_t r = 0; r < targets.size(); ++r) targets[r].detach().view({-1}).copy_(piece(flat, int64_t(r) * c, c));
  };
  return finish(w, async_op);
}

WorkPtr broadcast(Tensor& t, int src, const ProcessGroup& g, bool async_op) {
  note(t, g, 1);
  check_tensor("broadcast", t);
  const int root = g.group_rank_of(src);
  auto w = std::make_shared<Work>("broadcast", g);
  post_chunks(*w, t, "broadcast", g, [&](void* p, int count, MPI_Request* r) {
    return MPI_Ibcast(p, count, raw_type(t.dtype()), root, g.comm(), r);
  });
  w->keep_alive = {t};
  return finish(w, async_op);
}

WorkPtr reduce(Tensor& t, int dst, ReduceOp op, const ProcessGroup& g, bool async_op) {
  note(t, g, 1);
  check_tensor("reduce", t);
  check_reduce("reduce", t, op);
  const int root = g.group_rank_of(dst);
  const bool is_root = g.rank() == root;
  auto w = std::make_shared<Work>("reduce", g);
  const bool staged = needs_staging(t.dtype());
  Tensor buf = staged ? t.detach().to(DType::f32) : t.detach();
  post_chunks(*w, buf, "reduce", g, [&](void* p, int count, MPI_Request* r) {
    return MPI_Ireduce(is_root ? MPI_IN_PLACE : p, is_root ? p : nullptr, count, raw_type(buf.dtype()), mpi_op(op), root,
                       g.comm(), r);
  });
  w->keep_alive = {t, buf};
  Tensor target = t;
  const int n = g.size();
  w->on_complete = [target, buf, staged, op, n, is_root]() mutable {
    if (!is_root) return;
    if (op == ReduceOp::avg) kernels::scale_(buf, 1.0 / n);
    if (staged) target.detach().copy_(buf);
  };
  return finish(w, async_op);
}

WorkPtr send(const Tensor& t, int dst, int tag, const ProcessGroup& g, bool async_op) {
  g_traffic += t.numel() * int64_t(dtype_size(t.dtype()));
  check_tensor("send", t);
  const int peer = g.group_rank_of(dst);
  auto w = std::make_shared<Work>("send", g);
  post_chunks(*w, t, "send", g, [&](void* p, int count, MPI_Request* r) {
    return MPI_Isend(p, count, raw_type(t.dtype()), peer, tag, g.comm(), r);
  });
  w->keep_alive = {t};
  return finish(w, async_op);
}

WorkPtr recv(Tensor& t, int src, int tag, const ProcessGroup& g, bool async_op) {
  check_tensor("recv", t);
  const int peer = g.group_rank_of(src);
  auto w = std::make_shared<Work>("recv", g);
  post_chunks(*w, t, "recv", g, [&](void* p, int count, MPI_Request* r) {
    return MPI_Irecv(p, count, raw_type(t.dtype()), peer, tag, g.comm(), r);
  });
  w->keep_alive = {t};
  return finish(w, async_op);
}

WorkPtr barrier(const ProcessGroup& g, bool async_op) {
  auto w = std::make_shared<Work>("barrier", g);
  MPI_Request r;
  mpi_check(MPI_Ibarrier(g.comm(), &r), "barrier", g);
  w->requests.push_back(r);
  return finish(w, async_op);
}

double mean_where_held(std::optional<double> v, const ProcessGroup& g) {
  if (g.size() == 1) return v.value_or(0.0);
  double both[2] = {v.value_or(0.0), v ? 1.0 : 0.0};
  WatchdogScope wd("mean_where_held", g.name());
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_DOUBLE, MPI_SUM, g.comm()), "mean_where_held", g);
  return both[1] > 0 ? both[0] / both[1] : 0.0;
}

double all_reduce_scalar(double v, ReduceOp op, const ProcessGroup& g) {
  WatchdogScope wd("all_reduce_scalar", g.name());
  double out = 0;
  mpi_check(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, mpi_op(op), g.comm()), "all_reduce_scalar", g);
  return op == ReduceOp::avg ? out / g.size() : out;
}

std::vector<double> all_reduce_doubles(std::vector<double> v, ReduceOp op, const ProcessGroup& g) {
  WatchdogScope wd("all_reduce_doubles", g.name());
  BOOSTER_CHECK(v.size() < size_t(INT_MAX), "all_reduce_doubles: ", v.size(), " values exceed one MPI message");
  if (!v.empty())
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, mpi_op(op), g.comm()),
              "all_reduce_doubles", g);
  if (op == ReduceOp::avg)
    for (double& x : v) x /= g.size();
  return v;
}

std::vector<std::string> all_gather_bytes(const std::string& mine, const ProcessGroup& g) {
  WatchdogScope wd("all_gather_bytes", g.name());
  const int n = g.size();
  BOOSTER_CHECK(mine.size() < size_t(INT_MAX), "all_gather_bytes: ", mine.size(), " bytes exceed one MPI message");
  int len = int(mine.size());
  std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  mpi_check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, g.comm()), "all_gather_bytes", g);
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    displs[size_t(r)] = int(total);
    total += lens[size_t(r)];
  }
  BOOSTER_CHECK(total < INT_MAX, "all_gather_bytes: ", total, " bytes in all exceed one MPI message");
  std::string all(size_t(total), '\0');
  mpi_check(MPI_Allgatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, g.comm()),
            "all_gather_bytes", g);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) out.push_back(all.substr(size_t(displs[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}

WorkPtr all_to_all(Tensor& output, const Tensor& input, const ProcessGroup& g, bool async_op) {
  note(input, g, ring(g));
  check_tensor("all_to_all", output);
  check_tensor("all_to_all", input);
  const int n = g.size();
  const int64_t c = input.numel() / n;
  BOOSTER_CHECK_T(ShapeError, input.numel() == c * n && output.numel() == input.numel() && input.dtype() == output.dtype(),
                  "all_to_all: input ", input.describe(), " must hold ", n, " equal blocks, and output ",
                  output.describe(), " as many elements");
  BOOSTER_CHECK(c < g_max_elems, "all_to_all: blocks of ", c, " elements exceed one MPI message");
  auto w = std::make_shared<Work>("all_to_all", g);
  MPI_Request req;
  mpi_check(MPI_Ialltoall(input.raw_data(), int(c), raw_type(input.dtype()), output.raw_data(), int(c),
                          raw_type(input.dtype()), g.comm(), &req),
            "all_to_all", g);
  w->requests.push_back(req);
  w->keep_alive = {input, output};
  return finish(w, async_op);
}

WorkPtr all_to_all_v(Tensor& output, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets,
                     const Tensor& input, const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& send_offsets, const ProcessGroup& g, bool async_op) {
  note(input, g, ring(g));
  check_tensor("all_to_all_v", output);
  check_tensor("all_to_all_v", input);
  const size_t n = size_t(g.size());
  BOOSTER_CHECK_T(ShapeError, recv_counts.size() == n && recv_offsets.size() == n && send_counts.size() == n &&
                                  send_offsets.size() == n && input.dtype() == output.dtype(),
                  "all_to_all_v: counts and offsets for ", n, " ranks, input ", input.describe(), " and output ",
                  output.describe(), " of one dtype");
  std::vector<int> sc(n), so(n), rc(n), ro(n);
  for (size_t r = 0; r < n; ++r) {
    BOOSTER_CHECK_T(ShapeError, send_offsets[r] >= 0 && send_offsets[r] + send_counts[r] <= input.numel() &&
                                    recv_offsets[r] >= 0 && recv_offsets[r] + recv_counts[r] <= output.numel(),
                    "all_to_all_v: the blocks of rank ", r, " fall outside input ", input.describe(), " or output ",
                    output.describe());
    BOOSTER_CHECK(send_offsets[r] + send_counts[r] < g_max_elems && recv_offsets[r] + recv_counts[r] < g_max_elems,
                  "all_to_all_v: blocks beyond one MPI message (", g_max_elems, " elements)");
    sc[r] = int(send_counts[r]), so[r] = int(send_offsets[r]), rc[r] = int(recv_counts[r]), ro[r] = int(recv_offsets[r]);
  }
  auto w = std::make_shared<Work>("all_to_all_v", g);
  MPI_Request req;
  mpi_check(MPI_Ialltoallv(input.raw_data(), sc.data(), so.data(), raw_type(input.dtype()), output.raw_data(),
                           rc.data(), ro.data(), raw_type(output.dtype()), g.comm(), &req),
            "all_to_all_v", g);
  w->requests.push_back(req);
  w->keep_alive = {input, output};
  return finish(w, async_op);
}

}  // namespace booster::dist
