// Row redistribution between layouts (see redistribute.h).
#include "core/dist/redistribute.h"

#include <algorithm>
#include <set>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/kernels/raw.h"

namespace booster::dist {

RowLayout tp_row_layout(int64_t batch, int size, int tp, bool consecutive) {
  BOOSTER_CHECK(tp >= 1 && size % tp == 0, "tp_row_layout: tensor-parallel degree ", tp, " does not divide ", size,
                " ranks");
  const int dp = size / tp;
  BOOSTER_CHECK_T(ShapeError, batch % dp == 0, "tp_row_layout: a batch of ", batch, " rows does not split over ", dp,
                  " data-parallel slices (", size, " ranks, tensor-parallel degree ", tp, ")");
  const int64_t rows = batch / dp;
  RowLayout out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const int64_t slice = consecutive ? r / tp : r % dp;
    out[size_t(r)] = {slice * rows, (slice + 1) * rows};
  }
  return out;
}

namespace {

struct Segment {
  int64_t lo, hi;  // rows of the whole batch
  int src, dst;    // group ranks
};

// Every rank computes the same plan: each receiver's rows cut at the holders' boundaries,
// each piece from the receiver itself when it holds it, else from one of its holders
// (spread over them by the receiver's rank).
std::vector<Segment> plan(const RowLayout& from, const RowLayout& to) {
  std::set<int64_t> cuts;
  for (auto& [a, b] : from) cuts.insert(a), cuts.insert(b);
  std::vector<Segment> out;
  for (int k = 0; k < int(to.size()); ++k) {
    auto [c, e] = to[size_t(k)];
    std::vector<int64_t> bounds{c};
    for (auto it = cuts.upper_bound(c); it != cuts.end() && *it < e; ++it) bounds.push_back(*it);
    bounds.push_back(e);
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      const int64_t u = bounds[s], v = bounds[s + 1];
      if (u == v) continue;
      std::vector<int> holders;
      for (int r = 0; r < int(from.size()); ++r)
        if (from[size_t(r)].first <= u && v <= from[size_t(r)].second) holders.push_back(r);
      BOOSTER_CHECK(!holders.empty(), "redistribute_rows: rows [", u, ", ", v, ") are held by no rank of the old layout");
      const bool self = std::find(holders.begin(), holders.end(), k) != holders.end();
      out.push_back({u, v, self ? k : holders[size_t(k) % holders.size()], k});
    }
  }
  return out;
}

Tensor move_rows(const Tensor& x, const RowLayout& from, const RowLayout& to, const ProcessGroup& g) {
  const int me = g.rank(), n = g.size();
  const auto [a, b] = from[size_t(me)];
  Tensor in = x.contiguous();
  Shape shape = in.shape();
  const int64_t row = x.size(0) ? in.numel() / x.size(0) : 0;
  const auto [c, e] = to[size_t(me)];
  shape[0] = e - c;
  Tensor out = Tensor::empty(shape, x.dtype());
  Tensor flat_in = in.view({-1}), flat_out = out.view({-1});
  const auto segs = plan(from, to);
  std::vector<int64_t> sc(size_t(n), 0), so(size_t(n), 0), rc(size_t(n), 0), ro(size_t(n), 0);
  // Send buffer: by receiver, rows in order; receive buffer: by source, rows in order.
  std::vector<const Segment*> sends, recvs;
  for (auto& s : segs) {
    if (s.src == me && s.dst == me) {
      flat_out.narrow(0, (s.lo - c) * row, (s.hi - s.lo) * row).copy_(flat_in.narrow(0, (s.lo - a) * row, (s.hi - s.lo) * row));
    } else if (s.src == me) {
      sends.push_back(&s), sc[size_t(s.dst)] += (s.hi - s.lo) * row;
    } else if (s.dst == me) {
      recvs.push_back(&s), rc[size_t(s.src)] += (s.hi - s.lo) * row;
    }
  }
  bool any = false;  // every rank computes the same plan: all skip the exchange alike
  for (auto& s : segs) any = any || s.src != s.dst;
  if (!any) return out;
  for (int r = 1; r < n; ++r) so[size_t(r)] = so[size_t(r - 1)] + sc[size_t(r - 1)], ro[size_t(r)] = ro[size_t(r - 1)] + rc[size_t(r - 1)];
  Tensor send = Tensor::empty({std::max<int64_t>(so.back() + sc.back(), 1)}, x.dtype());
  Tensor recv = Tensor::empty({std::max<int64_t>(ro.back() + rc.back(), 1)}, x.dtype());
  std::vector<int64_t> fill = so;
  std::stable_sort(sends.begin(), sends.end(), [](auto* p, auto* q) { return p->dst < q->dst; });
  for (auto* s : sends) {
    const int64_t len = (s->hi - s->lo) * row;
    send.narrow(0, fill[size_t(s->dst)], len).copy_(flat_in.narrow(0, (s->lo - a) * row, len));
    fill[size_t(s->dst)] += len;
  }
  all_to_all_v(recv, rc, ro, send, sc, so, g);
  fill = ro;
  std::stable_sort(recvs.begin(), recvs.end(), [](auto* p, auto* q) { return p->src < q->src; });
  for (auto* s : recvs) {
    const int64_t len = (s->hi - s->lo) * row;
    flat_out.narrow(0, (s->lo - c) * row, len).copy_(recv.narrow(0, fill[size_t(s->src)], len));
    fill[size_t(s->src)] += len;
  }
  return out;
}

}  // namespace

Tensor redistribute_rows(const Tensor& x, const RowLayout& from, const RowLayout& to, const ProcessGroup& g,
                         double backward_scale) {
  const int me = g.rank(), n = g.size();
  BOOSTER_CHECK_T(ShapeError, int(from.size()) == n && int(to.size()) == n, "redistribute_rows: layouts for ",
                  from.size(), " and ", to.size(), " ranks over a group of ", n);
  const auto [a, b] = from[size_t(me)];
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(0) == b - a, "redistribute_rows: ", x.describe(),
                  " should hold rows [", a, ", ", b, ") of the batch on rank ", me, " of '", g.name(), "'");
  if (from == to && backward_scale == 1.0) return x;
  Tensor y;
  {
    NoGradGuard ng;
    y = move_rows(x.detach(), from, to, g);
  }
  const ProcessGroup* pg = &g;
  return autograd::record("RedistributeRows", {x}, y, [pg, from, to, backward_scale](const std::vector<Tensor>& gr) {
    Tensor g = move_rows(gr[0], to, from, *pg);
    if (backward_scale != 1.0) kernels::scale_(g, backward_scale);
    return std::vector<Tensor>{g};
  });
}

}  // namespace booster::dist
