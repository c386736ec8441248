// Differentiable collectives (see functional.h). The raw moves below run without history;
// each op records the opposite move as its backward.
#include "core/dist/functional.h"

#include "core/autograd/engine.h"
#include "core/dist/collectives.h"

#include <algorithm>

namespace booster::dist {

namespace {

int64_t checked_dim(const char* op, const Tensor& x, int64_t dim, int64_t parts, bool divides) {
  const int64_t nd = x.dim();
  BOOSTER_CHECK_T(ShapeError, dim >= -nd && dim < nd, op, ": dim ", dim, " of a ", nd, "-d tensor ",
                  shape_str(x.shape()));
  if (dim < 0) dim += nd;
  BOOSTER_CHECK_T(ShapeError, !divides || x.size(dim) % parts == 0, op, ": dim ", dim, " of ", shape_str(x.shape()),
                  " does not divide by the group size ", parts);
  return dim;
}

// This rank's chunk of x along dim.
Tensor raw_split(const Tensor& x, int64_t dim, const ProcessGroup& g) {
  NoGradGuard ng;
  const auto [start, len] = balanced_chunk(x.size(dim), g.size(), g.rank());
  return x.detach().narrow(dim, start, len).contiguous().clone();
}

// Every rank's chunk concatenated along dim into `full` elements (chunks padded to the
// largest for the all-gather).
Tensor raw_gather(const Tensor& x, int64_t dim, const ProcessGroup& g, int64_t full) {
  NoGradGuard ng;
  const int n = g.size();
  Tensor in = x.detach().contiguous();
  BOOSTER_CHECK_T(ShapeError, in.size(dim) == balanced_chunk(full, g.size(), g.rank()).second, "gather along dim ", dim,
                  ": this rank holds ", in.size(dim), " of ", full, " elements, its share is ",
                  balanced_chunk(full, g.size(), g.rank()).second);
  Shape ps = in.shape();
  ps[size_t(dim)] = balanced_chunk(full, g.size(), 0).second;  // the largest share
  const int64_t pn = shape_numel(ps);
  Tensor padded = in;
  if (ps != in.shape()) {
    padded = Tensor::zeros(ps, in.dtype());
    padded.narrow(dim, 0, in.size(dim)).copy_(in);
  }
  Tensor flat = Tensor::empty({n * pn}, in.dtype());
  all_gather(flat, padded, g);
  Shape s = in.shape();
  s[size_t(dim)] = full;
  Tensor out = Tensor::empty(s, in.dtype());
  for (int r = 0; r < n; ++r) {
    const auto [start, len] = balanced_chunk(full, g.size(), r);
    out.narrow(dim, start, len).copy_(flat.narrow(0, r * pn, pn).view(ps).narrow(dim, 0, len));
  }
  return out;
}

// The sum over ranks of x, this rank's chunk along dim.
Tensor raw_reduce_scatter(const Tensor& x, int64_t dim, const ProcessGroup& g) {
  NoGradGuard ng;
  const int n = g.size();
  const int64_t full = x.size(dim);
  Shape s = x.shape();
  s[size_t(dim)] = balanced_chunk(full, g.size(), 0).second;  // every rank's share padded to the largest
  const int64_t chunk = shape_numel(s);
  Tensor stage = Tensor::zeros({n * chunk}, x.dtype()), out = Tensor::empty(s, x.dtype());
  for (int r = 0; r < n; ++r) {
    const auto [start, len] = balanced_chunk(full, g.size(), r);
    stage.narrow(0, r * chunk, chunk).view(s).narrow(dim, 0, len).copy_(x.detach().narrow(dim, start, len));
  }
  reduce_scatter(out, stage, ReduceOp::sum, g, /*async_op=*/false, /*input_is_scratch=*/true);
  const int64_t mine = balanced_chunk(full, g.size(), g.rank()).second;
  return mine == s[size_t(dim)] ? out : out.narrow(dim, 0, mine).contiguous();
}

Tensor raw_all_reduce(const Tensor& x, const ProcessGroup& g) {
  NoGradGuard ng;
  Tensor out = x.detach().contiguous().clone();
  all_reduce(out, ReduceOp::sum, g);
  return out;
}

// Chunk r along sd (balanced_chunk of its size) goes to rank r; what arrives is
// concatenated along gd into `full` elements, rank r's block holding its balanced share.
Tensor raw_all_to_all(const Tensor& x, int64_t sd, int64_t gd, const ProcessGroup& g, int64_t full) {
  NoGradGuard ng;
  const int n = g.size(), me = g.rank();
  BOOSTER_CHECK_T(ShapeError, x.size(gd) == balanced_chunk(full, n, me).second, "all_to_all_along: this rank holds ",
                  x.size(gd), " of ", full, " elements along dim ", gd, ", its share is ",
                  balanced_chunk(full, n, me).second);
  Tensor in = x.detach();
  const size_t un = size_t(n);
  std::vector<int64_t> send_counts(un), send_offsets(un), recv_counts(un), recv_offsets(un);
  const int64_t per_sd = x.numel() / std::max<int64_t>(x.size(sd), 1);  // elements a unit of sd
  Shape rs = x.shape();  // a received block: my share of sd, the sender's of gd
  rs[size_t(sd)] = balanced_chunk(x.size(sd), n, me).second;
  const int64_t per_gd = shape_numel(rs) / std::max<int64_t>(rs[size_t(gd)], 1);
  int64_t so = 0, ro = 0;
  for (int r = 0; r < n; ++r) {
    send_counts[size_t(r)] = balanced_chunk(x.size(sd), n, r).second * per_sd;
    recv_counts[size_t(r)] = balanced_chunk(full, n, r).second * per_gd;
    send_offsets[size_t(r)] = so, recv_offsets[size_t(r)] = ro;
    so += send_counts[size_t(r)], ro += recv_counts[size_t(r)];
  }
  Tensor send = Tensor::empty({so}, x.dtype()), recv = Tensor::empty({ro}, x.dtype());
  for (int r = 0; r < n; ++r) {
    const auto [start, len] = balanced_chunk(x.size(sd), n, r);
    Shape cs = x.shape();
    cs[size_t(sd)] = len;
    send.narrow(0, send_offsets[size_t(r)], send_counts[size_t(r)]).view(cs).copy_(in.narrow(sd, start, len));
  }
  all_to_all_v(recv, recv_counts, recv_offsets, send, send_counts, send_offsets, g);
  Shape os = rs;
  os[size_t(gd)] = full;
  Tensor out = Tensor::empty(os, x.dtype());
  for (int r = 0; r < n; ++r) {
    const auto [start, len] = balanced_chunk(full, n, r);
    Shape bs = rs;
    bs[size_t(gd)] = len;
    out.narrow(gd, start, len).copy_(recv.narrow(0, recv_offsets[size_t(r)], recv_counts[size_t(r)]).view(bs));
  }
  return out;
}

}  // namespace

std::pair<int64_t, int64_t> balanced_chunk(int64_t n, int parts, int r) {
  const int64_t q = n / parts, extra = n % parts;
  return {r * q + std::min<int64_t>(r, extra), q + (r < extra ? 1 : 0)};
}

Tensor all_gather_along(const Tensor& x, int64_t dim, const ProcessGroup& g) {
  const int64_t d = checked_dim("all_gather_along", x, dim, g.size(), false);
  return g.size() == 1 ? x.detach() : raw_gather(x, d, g, x.size(d) * g.size());
}

Tensor reduce_scatter_along(const Tensor& x, int64_t dim, const ProcessGroup& g) {
  const int64_t d = checked_dim("reduce_scatter_along", x, dim, g.size(), true);
  return g.size() == 1 ? x.detach() : raw_reduce_scatter(x, d, g);
}

Tensor all_reduce_sum(const Tensor& x, const ProcessGroup& g) { return raw_all_reduce(x, g); }

Tensor reduce_backward(const Tensor& x, const ProcessGroup& g) {
  const ProcessGroup* pg = &g;
  return autograd::record("ReduceBackward", {x}, make_view(x, x.shape(), x.strides(), x.offset()),
                          [pg](const std::vector<Tensor>& gr) { return std::vector<Tensor>{raw_all_reduce(gr[0], *pg)}; });
}

Tensor reduce_forward(const Tensor& x, const ProcessGroup& g) {
  return autograd::record("ReduceForward", {x}, raw_all_reduce(x, g),
                          [](const std::vector<Tensor>& gr) { return std::vector<Tensor>{gr[0]}; });
}

Tensor split_forward_gather_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, bool balanced) {
  const int64_t d = checked_dim("split_forward_gather_backward", x, dim, g.size(), !balanced);
  const ProcessGroup* pg = &g;
  const int64_t full = x.size(d);
  return autograd::record("SplitForwardGatherBackward", {x}, raw_split(x, d, g),
                          [pg, d, full](const std::vector<Tensor>& gr) {
                            return std::vector<Tensor>{raw_gather(gr[0], d, *pg, full)};
                          });
}

Tensor gather_forward_split_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, int64_t full) {
  const int64_t d = checked_dim("gather_forward_split_backward", x, dim, g.size(), false);
  if (full < 0) full = x.size(d) * g.size();
  const ProcessGroup* pg = &g;
  return autograd::record("GatherForwardSplitBackward", {x}, raw_gather(x, d, g, full),
                          [pg, d](const std::vector<Tensor>& gr) { return std::vector<Tensor>{raw_split(gr[0], d, *pg)}; });
}

Tensor reducescatter_forward_gather_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, bool balanced) {
  const int64_t d = checked_dim("reducescatter_forward_gather_backward", x, dim, g.size(), !balanced);
  const ProcessGroup* pg = &g;
  const int64_t full = x.size(d);
  return autograd::record("ReduceScatterForwardGatherBackward", {x}, raw_reduce_scatter(x, d, g),
                          [pg, d, full](const std::vector<Tensor>& gr) {
                            return std::vector<Tensor>{raw_gather(gr[0], d, *pg, full)};
                          });
}

Tensor gather_forward_reducescatter_backward(const Tensor& x, int64_t dim, const ProcessGroup& g, int64_t full) {
  const int64_t d = checked_dim("gather_forward_reducescatter_backward", x, dim, g.size(), false);
  if (full < 0) full = x.size(d) * g.size();
  const ProcessGroup* pg = &g;
  return autograd::record("GatherForwardReduceScatterBackward", {x}, raw_gather(x, d, g, full),
                          [pg, d](const std::vector<Tensor>& gr) {
                            return std::vector<Tensor>{raw_reduce_scatter(gr[0], d, *pg)};
                          });
}

Tensor all_to_all_along(const Tensor& x, int64_t scatter_dim, int64_t gather_dim, const ProcessGroup& g,
                        bool balanced, int64_t full) {
  const int64_t sd = checked_dim("all_to_all_along", x, scatter_dim, g.size(), !balanced);
  const int64_t gd = checked_dim("all_to_all_along", x, gather_dim, g.size(), false);
  BOOSTER_CHECK_T(ShapeError, sd != gd, "all_to_all_along: the scatter and gather dims are both ", sd);
  if (full < 0) full = x.size(gd) * g.size();
  const ProcessGroup* pg = &g;
  const int64_t sd_full = x.size(sd);
  return autograd::record("AllToAll", {x}, raw_all_to_all(x, sd, gd, g, full),
                          [pg, sd, gd, sd_full](const std::vector<Tensor>& gr) {
                            return std::vector<Tensor>{raw_all_to_all(gr[0], gd, sd, *pg, sd_full)};
                          });
}

}  // namespace booster::dist
