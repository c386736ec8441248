// Differentiable collectives: forward values against what every rank's inputs say, and
// gradients against finite differences of one global loss, L = sum over ranks of
// <w_r, f(x)_r>, perturbing each element of each rank's input in turn (every rank takes
// part in every evaluation). The ops are linear, so differences are exact up to rounding.
#include <gtest/gtest.h>

#include <functional>

#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/functional.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"

using namespace booster;
using namespace booster::dist;

namespace {

using Op = std::function<Tensor(const Tensor&)>;

Tensor input_of(int rank, const Shape& s) {
  Tensor x = Tensor::empty(s);
  Generator(77 + uint64_t(rank)).normal_(x);
  return x;
}

// Checks d L / d x on every rank against central differences. A replicated input is one
// logical value held by every rank (perturbed on all at once; every rank must hold its
// whole gradient); a replicated output is one logical value too (one weight for all ranks,
// counted once). Otherwise each rank's tensor is its own part (weights per rank, summed).
void gradcheck(const Op& f, const Shape& in_shape, bool in_replicated, bool out_replicated, const std::string& what) {
  const auto& g = ProcessGroup::world();
  const int me = g.rank();
  Tensor x = input_of(in_replicated ? 0 : me, in_shape).requires_grad_();
  Tensor out = f(x);
  Tensor w = Tensor::empty(out.shape());
  Generator(500 + uint64_t(out_replicated ? 0 : me)).normal_(w);
  sum(mul(out, w)).backward();
  const auto analytic = x.grad().to_vector();
  auto loss = [&](const Tensor& xi) {
    NoGradGuard ng;
    const double global = all_reduce_scalar(double(sum(mul(f(xi), w)).item()), ReduceOp::sum);
    return out_replicated ? global / g.size() : global;
  };
  const double eps = 0.5;
  for (int r = 0; r < (in_replicated ? 1 : g.size()); ++r) {
    for (int64_t i = 0; i < shape_numel(in_shape); ++i) {
      Tensor plus = x.detach().clone(), minus = x.detach().clone();
      if (in_replicated || me == r) {
        plus.view({-1}).narrow(0, i, 1).fill_(plus.view({-1}).to_vector()[size_t(i)] + eps);
        minus.view({-1}).narrow(0, i, 1).fill_(minus.view({-1}).to_vector()[size_t(i)] - eps);
      }
      const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
      if (in_replicated || me == r) {
        EXPECT_NEAR(analytic[size_t(i)], numeric, 1e-3 * (1 + std::abs(numeric)))
            << what << ": element " << i << " of rank " << me;
      }
    }
  }
}

// Every rank's input, concatenated along dim (what a gather must produce).
Tensor all_inputs(const Shape& s, int64_t dim) {
  std::vector<Tensor> xs;
  for (int r = 0; r < world_size(); ++r) xs.push_back(input_of(r, s));
  return concat(xs, dim);
}

}  // namespace

TEST(DistFunctional, ForwardValues) {
  const auto& g = ProcessGroup::world();
  const int n = g.size(), me = g.rank();
  const Shape s{2 * n, 3};
  Tensor gathered = gather_forward_split_backward(input_of(me, s), 1, g);
  EXPECT_EQ(gathered.to_vector(), all_inputs(s, 1).to_vector());
  Tensor summed = reduce_forward(input_of(me, s), g);
  Tensor want = Tensor::zeros(s);
  for (int r = 0; r < n; ++r) want = add(want, input_of(r, s));
  for (size_t i = 0; i < size_t(want.numel()); ++i) EXPECT_NEAR(summed.to_vector()[i], want.to_vector()[i], 1e-5);
  Tensor rs = reducescatter_forward_gather_backward(input_of(me, s), 0, g);
  auto full = want.to_vector(), part = rs.to_vector();
  ASSERT_EQ(part.size(), size_t(2 * 3));
  for (size_t i = 0; i < part.size(); ++i) EXPECT_NEAR(part[i], full[size_t(me) * 6 + i], 1e-5);
  EXPECT_EQ(split_forward_gather_backward(input_of(me, s), 0, g).to_vector(),
            input_of(me, s).narrow(0, 2 * me, 2).contiguous().to_vector());
  // all-to-all [n*2, 3] scattered on dim 0, gathered on dim 1: chunk me of every rank.
  Tensor a2a = all_to_all_along(input_of(me, s), 0, 1, g);
  std::vector<Tensor> mine;
  for (int r = 0; r < n; ++r) mine.push_back(input_of(r, s).narrow(0, 2 * me, 2));
  EXPECT_EQ(a2a.to_vector(), concat(mine, 1).to_vector());
  // Balanced (Ulysses over a ViT's odd token count): rows 2n + 1 scattered as balanced
  // chunks, each rank's balanced share of 2n + 3 columns gathered.
  const int64_t rows = 2 * n + 1, cols = 2 * n + 3;
  auto part_of = [&](int r) { return input_of(r, {rows, balanced_chunk(cols, n, r).second}); };
  Tensor bal = all_to_all_along(part_of(me), 0, 1, g, true, cols);
  const auto [row0, my_rows] = balanced_chunk(rows, n, me);
  std::vector<Tensor> blocks;
  for (int r = 0; r < n; ++r) blocks.push_back(part_of(r).narrow(0, row0, my_rows));
  EXPECT_EQ(bal.to_vector(), concat(blocks, 1).to_vector());
  // ... and back: the exchanged dims restore every rank's own part.
  EXPECT_EQ(all_to_all_along(bal, 1, 0, g, true, rows).to_vector(), part_of(me).to_vector());
  if (n > 1) {
    EXPECT_THROW(all_to_all_along(part_of(me), 0, 1, g, true, cols + n), ShapeError);  // every share one short
    EXPECT_THROW(all_to_all_along(part_of(me), 0, 1, g), ShapeError);  // 2n + 1 rows do not divide
    EXPECT_THROW(split_forward_gather_backward(Tensor::zeros({n + 1, 2}), 0, g), ShapeError);
  }
}

TEST(DistFunctional, GradientsMatchFiniteDifferences) {
  const auto& g = ProcessGroup::world();
  const int n = g.size();
  // Before a column-parallel linear: a replicated input, used differently by each rank.
  gradcheck([&](const Tensor& x) { return reduce_backward(x, g); }, {3, 2}, true, false, "reduce_backward");
  // After a row-parallel linear: partial sums in, one replicated sum out.
  gradcheck([&](const Tensor& x) { return reduce_forward(x, g); }, {3, 2}, false, true, "reduce_forward");
  gradcheck([&](const Tensor& x) { return split_forward_gather_backward(x, 1, g); }, {2, 2 * n}, true, false,
            "split_forward_gather_backward");
  gradcheck([&](const Tensor& x) { return gather_forward_split_backward(x, 0, g); }, {2, 3}, false, true,
            "gather_forward_split_backward");
  // Sequence parallelism: partial sums in, sequence shards out; and shards in, gathered for
  // each rank's own column-parallel use.
  gradcheck([&](const Tensor& x) { return reducescatter_forward_gather_backward(x, 0, g); }, {n, 3}, false, false,
            "reducescatter_forward_gather_backward");
  gradcheck([&](const Tensor& x) { return gather_forward_reducescatter_backward(x, 1, g); }, {2, 2}, false, false,
            "gather_forward_reducescatter_backward");
  gradcheck([&](const Tensor& x) { return all_to_all_along(x, 1, 0, g); }, {2, 2 * n}, false, false, "all_to_all_along");
  gradcheck([&](const Tensor& x) { return all_to_all_along(x, 1, 0, g, true, 2 * n); }, {2, 2 * n + 1}, false, false,
            "all_to_all_along balanced");
  // A column-parallel then row-parallel pair as tensor parallelism composes them: replicated
  // in, replicated out, each rank multiplying by its own shard of the weights.
  gradcheck(
      [&](const Tensor& x) {
        Tensor w1 = input_of(100 + g.rank(), {2, 3}), w2 = input_of(200 + g.rank(), {3, 2});
        return reduce_forward(linear(linear(reduce_backward(x, g), w1), w2), g);
      },
      {2, 3}, true, true, "column-row pair");
}

// A sequence that does not divide (a ViT's 197 tokens): balanced shards, n / size each and
// one more on the first n % size ranks, gathered back to the full length.
TEST(DistFunctional, BalancedShardsOfAnUnevenSequence) {
  const auto& g = ProcessGroup::world();
  const int n = g.size(), me = g.rank();
  const int64_t t = 2 * n + 1;
  const auto [start, len] = balanced_chunk(t, n, me);
  EXPECT_EQ(len, me < 1 ? 3 : 2);
  EXPECT_EQ(start, me == 0 ? 0 : 3 + 2 * (me - 1));
  Tensor x = input_of(0, {2, t, 3});
  Tensor shard = split_forward_gather_backward(x, 1, g, true);
  EXPECT_EQ(shard.to_vector(), x.narrow(1, start, len).contiguous().to_vector());
  EXPECT_EQ(gather_forward_split_backward(shard, 1, g, t).to_vector(), x.to_vector());
  EXPECT_THROW(gather_forward_split_backward(shard, 1, g, t + 1 + n), ShapeError);  // a share that does not match
  gradcheck([&](const Tensor& v) { return gather_forward_reducescatter_backward(split_forward_gather_backward(v, 1, g, true), 1, g, t); },
            {2, t, 2}, true, false, "balanced split, then gather with reduce-scatter backward");
  gradcheck([&](const Tensor& v) { return gather_forward_split_backward(reducescatter_forward_gather_backward(v, 0, g, true), 0, g, t); },
            {t, 2}, false, true, "balanced reduce-scatter, then gather");
}

