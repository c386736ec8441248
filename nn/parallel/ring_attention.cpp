// Ring attention (see ring_attention.h).
#include "nn/parallel/ring_attention.h"

#include <cmath>
#include <limits>

#include "core/autograd/engine.h"
#include "core/common/check.h"
#include "core/common/profiler.h"
#include "core/dist/ring_collectives.h"
#include "core/kernels/ops.h"

namespace booster::nn {
namespace {

constexpr int kKeysTag = 7301, kGradsTag = 7302;  // below dist::kUserTagLimit; the sp group's own communicator

// Which block of a zigzag rank's work step s is: the arriving keys are rank src's.
//   src == rank: both chunks, causal (the local order is the positions' order);
//   src < rank:  every local query over src's first chunk (its second lies after ours);
//   src > rank:  our second chunk's queries over both of src's chunks (our first lies before them).
struct Step {
  bool causal;
  int64_t q_begin, q_len, k_len;  // query rows [q_begin, + q_len), keys [0, k_len)
};
Step step_of(int rank, int src, int64_t t) {
  const int64_t c = t / 2;
  if (src == rank) return {true, 0, t, t};
  if (src < rank) return {false, 0, t, c};
  return {false, c, c, t};
}

// out (contiguous [B, t, h, d]: heads merge by a view afterwards) and lse ([B, h, t]) take in
// a block's (out_b [B, h, m, d], lse_b over rows q_begin..+m): the two partial softmaxes
// weighted by their shares of the combined log-sum-exp.
void merge(Tensor& out, Tensor& lse, const AttentionBlock& blk, int64_t q_begin) {
  const int64_t nb = out.size(0), t = out.size(1), nh = out.size(2), d = out.size(3), m = blk.lse.size(2);
  float* o = out.data<float>();
  float* l = lse.data<float>();
  const float* ob = blk.out.data<float>();
  const float* lb = blk.lse.data<float>();
#pragma omp parallel for collapse(2)
  for (int64_t bh = 0; bh < nb * nh; ++bh)
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = bh * t + q_begin + i, bb = bh / nh, hh = bh % nh;
      const float a = l[row], b = lb[bh * m + i];
      const float hi = std::max(a, b);
      const float wa = a == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(a - hi), wb = std::exp(b - hi);
      const float total = wa + wb;
      l[row] = hi + std::log(total);
      float* orow = o + ((bb * t + q_begin + i) * nh + hh) * d;
      const float* brow = ob + (bh * m + i) * d;
      for (int64_t c = 0; c < d; ++c) orow[c] = (orow[c] * wa + brow[c] * wb) / total;
    }
}

// dst[:, :, begin:begin + src.size(2)] += src (dst contiguous f32 [B, h, t, d], src contiguous).
void add_rows(Tensor& dst, const Tensor& src, int64_t begin) {
  const int64_t nbh = dst.size(0) * dst.size(1), t = dst.size(2), d = dst.size(3), m = src.size(2);
  float* o = dst.data<float>();
  const float* s = src.data<float>();
#pragma omp parallel for
  for (int64_t bh = 0; bh < nbh; ++bh)
    for (int64_t i = 0; i < m * d; ++i) o[(bh * t + begin) * d + i] += s[bh * m * d + i];
}

Tensor rows(const Tensor& x, int64_t begin, int64_t len) { return x.narrow(2, begin, len); }

Tensor f32(const Tensor& x) { return x.detach().to(DType::f32).contiguous(); }

// Step s's attention dropout: this rank's rows against rank src's keys (counters of all n x t keys).
BlockDropout step_dropout(double p, uint64_t seed, const Step& st, int src, int n, int64_t t) {
  if (p <= 0) return {};
  return {p, seed, st.q_begin, t, int64_t(src) * t, int64_t(n) * t};
}

// The backward: keys and values go round again, each with the gradients gathered for it.
// kv_mine: this rank's [k; v] ([2, B, h, t, d], f32), as the forward sent it.
std::vector<Tensor> ring_backward(const Tensor& q, const Tensor& kv_mine, const Tensor& out, const Tensor& lse,
                                  const Tensor& gout, const dist::ProcessGroup& sp, double alpha, double dropout_p,
                                  uint64_t seed) {
  const int n = sp.size(), r = sp.rank();
  const int64_t t = q.size(2);
  const Tensor go = f32(gout);
  const Tensor delta = sum(mul(go, out), {3});  // <dO, O> a query, over all its keys
  Tensor dq = Tensor::zeros(q.shape());
  Tensor kv = kv_mine;
  Tensor grads = Tensor::zeros(kv.shape());                              // dK, dV of the keys held now
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    dist::RingShift next_kv;
    if (s + 1 < n) next_kv = dist::ring_shift(kv, sp, kKeysTag);
    const Step st = step_of(r, src, t);
    const Tensor kb = rows(kv.select(0, 0), 0, st.k_len), vb = rows(kv.select(0, 1), 0, st.k_len);
    std::vector<Tensor> g = attention_block_backward(rows(q, st.q_begin, st.q_len), kb, vb,
                                                              rows(go, st.q_begin, st.q_len), rows(lse, st.q_begin, st.q_len),
                                                              delta.narrow(2, st.q_begin, st.q_len), st.causal, alpha,
                                                              step_dropout(dropout_p, seed, st, src, n, t));
    add_rows(dq, g[0], st.q_begin);
    Tensor gk = grads.select(0, 0), gv = grads.select(0, 1);
    add_rows(gk, g[1], 0);
    add_rows(gv, g[2], 0);
    if (n > 1) {  // these gradients follow their keys; after the last step they reach their owner
      dist::RingShift back = dist::ring_shift(grads, sp, kGradsTag);
      back.wait();
      grads = back.incoming;
    }
    if (s + 1 < n) {
      next_kv.wait();
      kv = next_kv.incoming;
    }
  }
  return {dq, grads.select(0, 0), grads.select(0, 1)};
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const dist::ProcessGroup& sp, double alpha,
                      double dropout_p) {
  ProfileScope prof_("ring attention");
  BOOSTER_CHECK_T(ShapeError, q.dim() == 4 && q.shape() == k.shape() && k.shape() == v.shape(),
                  "ring attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
                  shape_str(v.shape()), " must all be [B, h, t, d] (key/value heads repeated to the query heads)");
  BOOSTER_CHECK_T(ShapeError, q.size(2) % 2 == 0, "ring attention: this rank's ", q.size(2),
                  " tokens are not two equal zigzag chunks");
  BOOSTER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "ring attention: dropout_p ", dropout_p, " outside [0, 1)");
  const int n = sp.size(), r = sp.rank();
  const int64_t t = q.size(2);
  const uint64_t seed = dropout_p > 0 ? default_generator().next_u64() : 0;  // the masks' key, kept for the backward
  const Tensor qd = f32(q);
  Tensor out = Tensor::zeros({q.size(0), t, q.size(1), q.size(3)});  // [B, t, h, d]
  Tensor lse = Tensor::full({q.size(0), q.size(1), t}, -std::numeric_limits<double>::infinity());
  const Tensor kv_mine = concat({k.detach().unsqueeze(0), v.detach().unsqueeze(0)}, 0).to(DType::f32).contiguous();
  Tensor kv = kv_mine;  // [2, B, h, t, d], one message a step
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    dist::RingShift next;
    if (s + 1 < n) next = dist::ring_shift(kv, sp, kKeysTag);  // on the wire while this block is multiplied
    const Step st = step_of(r, src, t);
    merge(out, lse,
          attention_block_forward(rows(qd, st.q_begin, st.q_len), rows(kv.select(0, 0), 0, st.k_len),
                                           rows(kv.select(0, 1), 0, st.k_len), st.causal, alpha,
                                           step_dropout(dropout_p, seed, st, src, n, t)),
          st.q_begin);
    if (s + 1 < n) {
      next.wait();
      kv = next.incoming;
    }
  }
  const DType dt = q.dtype();
  out = out.permute({0, 2, 1, 3});  // [B, h, t, d] over [B, t, h, d] memory
  return autograd::record("ring_attention", {q, k, v}, out.to(dt),
                          [qd, kv_mine, out, lse, &sp, alpha, dt, dropout_p, seed](const std::vector<Tensor>& g) {
                            std::vector<Tensor> grads = ring_backward(qd, kv_mine, out, lse, g[0], sp, alpha, dropout_p, seed);
                            for (auto& x : grads) x = x.to(dt);
                            return grads;
                          });
}

std::pair<int64_t, int64_t> zigzag_offsets(int64_t tokens_here, const dist::ProcessGroup& sp) {
  const int64_t c = tokens_here / 2;
  return {sp.rank() * c, (2 * int64_t(sp.size()) - 1 - sp.rank()) * c};
}

}  // namespace booster::nn
