// Ring collectives (see ring_collectives.h).
#include "core/dist/ring_collectives.h"

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/common/parallel.h"
#include "core/kernels/raw.h"

namespace booster::dist {

namespace {

void combine(float* acc, const float* in, int64_t n, ReduceOp op) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        for (int64_t i = b; i < e; ++i) acc[i] += in[i];
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

void check(int rc, const ProcessGroup& g) {
  if (rc != MPI_SUCCESS) BOOSTER_THROW(BackendError, "reduce_scatter on group '", g.name(), "' failed posting a message");
}

}  // namespace

WorkPtr ring_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op, const ProcessGroup& g) {
  NoGradGuard ng;
  auto w = std::make_shared<Work>("reduce_scatter", g);
  const int n = g.size(), r = g.rank();
  const int64_t c = output.numel();
  // The rounds accumulate in place in an fp32 copy of the input (the input stays untouched).
  Tensor buf = input.detach().to(DType::f32).contiguous();
  if (buf.is_same(input) || buf.shares_storage(input)) buf = buf.clone();
  Tensor tmp = Tensor::empty({std::max<int64_t>(c, 1)});
  Tensor out = output;
  const int tag = g.next_collective_tag();
  auto step = std::make_shared<int>(0);
  float* base = buf.data<float>();
  float* in = tmp.data<float>();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  const MPI_Comm comm = g.comm();
  const ProcessGroup* pg = &g;
  Work* wp = w.get();  // the phases belong to the Work: no reference back to it
  auto post = [wp, base, in, c, n, r, next, prev, comm, tag, pg](int s) {
    const int64_t send_block = ((r - s - 1) % n + n) % n;
    for (int64_t off = 0; off < c; off += max_message_elements()) {
      const int len = int(std::min<int64_t>(max_message_elements(), c - off));
      MPI_Request a, b;
      check(MPI_Irecv(in + off, len, MPI_FLOAT, prev, tag, comm, &a), *pg);
      check(MPI_Isend(base + send_block * c + off, len, MPI_FLOAT, next, tag, comm, &b), *pg);
      wp->requests.push_back(a);
      wp->requests.push_back(b);
    }
  };
  if (n > 1) post(0);
  w->next_phase = [step, post, base, in, c, n, r, op]() {
    if (n == 1) return false;
    const int64_t recv_block = ((r - *step - 2) % n + n) % n;
    combine(base + recv_block * c, in, c, op);
    if (++*step >= n - 1) return false;
    post(*step);
    return true;
  };
  w->on_complete = [buf, out, c, r, n, op]() mutable {
    Tensor mine = buf.narrow(0, int64_t(r) * c, c);
    if (op == ReduceOp::avg) kernels::scale_(mine, 1.0 / n);
    out.detach().view({-1}).copy_(mine);
  };
  w->keep_alive = {buf, tmp, input, output};
  return w;
}

}  // namespace booster::dist
