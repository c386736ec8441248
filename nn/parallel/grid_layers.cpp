// The layers of 2D, 2.5D and 3D tensor parallelism (see grid_layers.h).
#include "nn/parallel/grid_layers.h"

#include <cmath>
#include <tuple>

#include "core/autograd/engine.h"
#include "core/dist/functional.h"
#include "core/kernels/raw.h"
#include "nn/parallel/linear_1d.h"

namespace booster::nn {

std::string grid_type_name(const TensorGrid& grid, const std::string& kind) {
  return kind + (grid.mode() == "2d" ? "2D" : grid.mode() == "2.5d" ? "2p5D" : "3D");
}

Tensor grid_rows(const Tensor& x, const TensorGrid& grid) {
  const auto& rows = *grid.layout().rows;
  const int64_t n = rows.size();
  BOOSTER_CHECK_T(ShapeError, x.dim() >= 1 && x.size(0) % n == 0, grid.describe(), ": a batch of ",
                  x.dim() ? x.size(0) : 0, " rows does not divide into its ", n,
                  " row blocks (every micro-batch of a replica must be a multiple of ", n, ")");
  const int64_t each = x.size(0) / n;
  return x.narrow(0, rows.rank() * each, each).contiguous();
}

// ---- the grid's product ----------------------------------------------------------------

namespace {
// x gathered over the spec's input group and w over its weight group, both contiguous.
std::pair<Tensor, Tensor> gathered(const Tensor& x, const Tensor& w, const GridLinearSpec& s) {
  Tensor xg = dist::all_gather_along(x, s.x_dim, *s.gather_x).contiguous();
  Tensor wg = dist::all_gather_along(w.detach(), 1, *s.gather_w).contiguous();
  BOOSTER_CHECK_T(ShapeError, xg.size(-1) == wg.size(1), "grid linear: the gathered input ", shape_str(xg.shape()),
                  " does not fit the gathered weight ", shape_str(wg.shape()));
  return {xg, wg};
}
}  // namespace

// x: [R, ..., in_x] -> [R', ..., out / out_blocks]
Tensor grid_matmul(const Tensor& x, const Tensor& w, const Tensor& b, const GridLinearSpec& spec) {
  BOOSTER_CHECK_T(ShapeError, x.dtype() == w.dtype() && w.dim() == 2 && x.dim() >= 2, "grid linear: input ",
                  shape_str(x.shape()), " ", dtype_name(x.dtype()), " and weight ", shape_str(w.shape()), " ",
                  dtype_name(w.dtype()), " (need [R, ..., K] and [N, K] of one dtype)");
  Tensor xd = x.detach();
  Tensor y;
  {
    NoGradGuard ng;
    auto [xg, wg] = gathered(xd, w, spec);
    const int64_t k = wg.size(1), n = wg.size(0), m = xg.numel() / k;
    BOOSTER_CHECK_T(ShapeError, !b.defined() || (b.dim() == 1 && b.size(0) == n), "grid linear: bias ",
                    shape_str(b.shape()), " does not fit the weight block's ", n, " outputs");
    Tensor bias = b.defined() ? b.detach().to(x.dtype()) : Tensor();
    Shape ys = xg.shape();
    ys.back() = n;
    // 2D / 2.5D add the bias in the product; 3D after summing the partial products.
    y = kernels::mm(xg.view({m, k}), wg.transpose(0, 1), spec.scatter_y ? Tensor() : bias.view({1, n}), {m, n}).view(ys);
    if (spec.scatter_y) {
      y = dist::reduce_scatter_along(y, 0, *spec.scatter_y);
      if (bias.defined()) y = add(y, bias);
    }
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  const DType bt = b.defined() ? b.dtype() : x.dtype();
  const GridLinearSpec* s = &spec;
  // Only the local blocks are kept: backward gathers them again (the communication of the
  // forward twice, as SUMMA's), so activations stay partitioned in memory.
  return autograd::record("GridLinear", {x, w, b}, y, [xd, w, s, gx, gw, gb, bt](const std::vector<Tensor>& g) {
    NoGradGuard ng;
    Tensor db = gb ? kernels::sum_dims(g[0].contiguous().view({-1, g[0].size(-1)}), {0}, false).to(bt) : Tensor();
    Tensor dy = s->scatter_y ? dist::all_gather_along(g[0], 0, *s->scatter_y) : g[0];
    auto [xg, wg] = gathered(xd, w, *s);
    const int64_t k = wg.size(1), n = wg.size(0), m = xg.numel() / k;
    Tensor dy2 = dy.contiguous().view({m, n});
    Tensor dx, dw;
    if (gx) dx = dist::reduce_scatter_along(kernels::mm(dy2, wg, Tensor(), {m, k}).view(xg.shape()), s->x_dim, *s->gather_x);
    if (gw) dw = dist::reduce_scatter_along(kernels::mm_tn(dy2, xg.view({m, k})), 1, *s->gather_w);
    return std::vector<Tensor>{dx, dw, db};
  });
}

// ---- layer norm over partitioned features ----------------------------------------------

namespace {
// xhat = (x - mean) * rstd of rows x [rows, hb] (f32) into a new [rows, hb].
Tensor normalized(const Tensor& xf, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = xf.size(0), hb = xf.size(1);
  Tensor xhat = Tensor::empty({rows, hb});
  const float *px = xf.data<float>(), *pm = mean.data<float>(), *ps = rstd.data<float>();
  float* ph = xhat.data<float>();
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hb; ++j) ph[r * hb + j] = (px[r * hb + j] - pm[r]) * ps[r];
  return xhat;
}

// grid_layer_norm's backward: dx, dw and db (f32) from dy and what the forward kept (its
// input, the rows' means and reciprocal deviations; the normalized rows are recomputed).
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& wf,
                                                       const dist::ProcessGroup& feature, int64_t full) {
  const int64_t hb = x.size(-1), rows = x.numel() / hb;
  const Tensor xhat = normalized(x.to(DType::f32).contiguous().view({rows, hb}), mean, rstd);
  Tensor dyf = dy.to(DType::f32).contiguous();
  const float *pd = dyf.data<float>(), *ph = xhat.data<float>(), *ps = rstd.data<float>(), *pw = wf.data<float>();
  // Per row: the sums of dxhat and of dxhat * xhat over every feature block, in one message.
  Tensor ab = Tensor::empty({rows, 2});
  float* pab = ab.data<float>();
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    double a = 0, c = 0;
    for (int64_t j = 0; j < hb; ++j) {
      const double dh = double(pd[r * hb + j]) * pw[j];
      a += dh;
      c += dh * ph[r * hb + j];
    }
    pab[2 * r] = float(a), pab[2 * r + 1] = float(c);
  }
  Tensor sums = dist::all_reduce_sum(ab, feature);
  const float* psum = sums.data<float>();
  Tensor dx = Tensor::empty({rows, hb});
  float* pdx = dx.data<float>();
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    const float a = psum[2 * r] / float(full), c = psum[2 * r + 1] / float(full);
    for (int64_t j = 0; j < hb; ++j)
      pdx[r * hb + j] = ps[r] * (pd[r * hb + j] * pw[j] - a - ph[r * hb + j] * c);
  }
  std::vector<double> dw(size_t(hb), 0.0), db(size_t(hb), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hb; ++j) {
      dw[size_t(j)] += double(pd[r * hb + j]) * ph[r * hb + j];
      db[size_t(j)] += pd[r * hb + j];
    }
  Tensor gw = Tensor::empty({hb}), gb = Tensor::empty({hb});
  for (int64_t j = 0; j < hb; ++j) gw.data<float>()[j] = float(dw[size_t(j)]), gb.data<float>()[j] = float(db[size_t(j)]);
  return {dx, gw, gb};
}

// The rows' means and reciprocal deviations over every feature block: two passes (the
// mean, then the squared deviations from it), each summed over the group.
std::pair<Tensor, Tensor> row_statistics(const Tensor& xf, double eps, const dist::ProcessGroup& feature) {
  const int64_t rows = xf.size(0), hb = xf.size(1), full = hb * feature.size();
  const float* px = xf.data<float>();
  Tensor s1 = Tensor::empty({rows});
  float* p1 = s1.data<float>();
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t j = 0; j < hb; ++j) acc += px[r * hb + j];
    p1[r] = float(acc);
  }
  Tensor mean = dist::all_reduce_sum(s1, feature);
  float* pm = mean.data<float>();
  for (int64_t r = 0; r < rows; ++r) pm[r] /= float(full);
  Tensor s2 = Tensor::empty({rows});
  float* p2 = s2.data<float>();
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t j = 0; j < hb; ++j) acc += double(px[r * hb + j] - pm[r]) * (px[r * hb + j] - pm[r]);
    p2[r] = float(acc);
  }
  Tensor rstd = dist::all_reduce_sum(s2, feature);
  float* ps = rstd.data<float>();
  for (int64_t r = 0; r < rows; ++r) ps[r] = float(1.0 / std::sqrt(double(ps[r]) / double(full) + eps));
  return {mean, rstd};
}
}  // namespace

// x: [..., H / parts] -> [..., H / parts]
Tensor grid_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const dist::ProcessGroup& feature) {
  const int64_t hb = x.size(-1), rows = x.numel() / std::max<int64_t>(hb, 1), full = hb * feature.size();
  BOOSTER_CHECK_T(ShapeError, w.numel() == hb && b.numel() == hb, "grid layer norm: weight ", shape_str(w.shape()),
                  " and bias ", shape_str(b.shape()), " do not fit the input's ", hb, " features");
  Tensor y = Tensor::empty({rows, hb}), mean, rstd, wf;
  {
    NoGradGuard ng;
    Tensor xf = x.detach().to(DType::f32).contiguous().view({rows, hb});
    wf = w.detach().to(DType::f32).contiguous();
    Tensor bf = b.detach().to(DType::f32).contiguous();
    std::tie(mean, rstd) = row_statistics(xf, eps, feature);
    const float *px = xf.data<float>(), *pm = mean.data<float>(), *ps = rstd.data<float>();
    const float *pw = wf.data<float>(), *pb = bf.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for if (rows > 64)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < hb; ++j) py[r * hb + j] = (px[r * hb + j] - pm[r]) * ps[r] * pw[j] + pb[j];
  }
  const Shape shape = x.shape();
  const DType xt = x.dtype(), wt = w.dtype(), bt = b.dtype();
  const dist::ProcessGroup* fg = &feature;
  Tensor xd = x.detach();
  return autograd::record("GridLayerNorm", {x, w, b}, y.to(xt).view(shape), [=](const std::vector<Tensor>& g) {
    NoGradGuard ng;
    auto [dx, gw, gb] = layer_norm_backward(g[0], xd, mean, rstd, wf, *fg, full);
    return std::vector<Tensor>{dx.to(xt).view(shape), gw.to(wt), gb.to(bt)};
  });
}

// ---- modules ---------------------------------------------------------------------------

namespace {
// A module's tensor as an empty one of its shape (clone() fills it), or undefined.
Tensor empty_as(const TensorSlot& t) { return t.defined() ? Tensor::empty(t->shape(), t->dtype()) : Tensor(); }
}  // namespace

std::shared_ptr<Linear> GridLinear::from_native_module(const std::shared_ptr<Module>& native, const TensorGrid& grid,
                                                       const GridLinearSpec& spec) {
  if (auto done = std::dynamic_pointer_cast<GridLinear>(native)) return done;
  const std::string who = grid_type_name(grid, "Linear");
  auto [w, b] = linear_handles(native, who);
  shard_parameter_blocks(w, {{0, {spec.out_block, spec.out_blocks}}, {1, {spec.in_block, spec.in_blocks}}},
                         who + " weight (" + grid.describe() + ")");
  shard_parameter_blocks(b, {{0, {spec.out_block, spec.out_blocks}}}, who + " bias (" + grid.describe() + ")");
  return std::make_shared<GridLinear>(w, b, grid, spec);
}

GridLinear::GridLinear(Tensor weight, Tensor bias, const TensorGrid& grid, const GridLinearSpec& spec)
    : Linear(weight.defined() ? weight : Tensor::empty({1, 1}), bias), grid_(grid), spec_(spec) {
  if (!weight.defined()) replace_tensor("weight", Tensor());  // released: a pipeline stage that does not hold it
}

std::string GridLinear::type_name() const { return grid_type_name(grid_, "Linear"); }

// x: [R, ..., in_x] -> [R', ..., out / out_blocks]
Tensor GridLinear::forward(const Tensor& x) {
  BOOSTER_CHECK(weight.defined(), type_name(), ": this rank released the layer (another pipeline stage holds it)");
  Tensor w = spec_.depth ? dist::reduce_backward(weight, *spec_.depth) : weight.get();
  return grid_matmul(x, w, bias.defined() ? dist::reduce_backward(bias, *spec_.out.rows) : Tensor(), spec_);
}

std::shared_ptr<Module> GridLinear::fresh() const {
  return std::make_shared<GridLinear>(empty_as(weight), empty_as(bias), grid_, spec_);
}

std::shared_ptr<UnaryModule> GridLayerNorm::from_native_module(const std::shared_ptr<Module>& native,
                                                               const TensorGrid& grid) {
  if (auto done = std::dynamic_pointer_cast<GridLayerNorm>(native)) return done;
  const std::string who = grid_type_name(grid, "LayerNorm");
  auto* ln = dynamic_cast<LayerNorm*>(native.get());
  BOOSTER_CHECK(ln != nullptr && ln->weight.defined() && ln->bias.defined(), who,
                ".from_native_module: expects an affine LayerNorm, got a ", native ? native->type_name() : "null module");
  const auto& L = grid.layout();
  for (Tensor t : {ln->weight.get(), ln->bias.get()})
    shard_parameter_blocks(t, {{0, {L.feature_block(), L.feature_blocks()}}}, who + " (" + grid.describe() + ")");
  return std::make_shared<GridLayerNorm>(ln->weight.get(), ln->bias.get(), ln->eps(), grid);
}

GridLayerNorm::GridLayerNorm(Tensor weight, Tensor bias, double eps, const TensorGrid& grid)
    : LayerNorm(std::move(weight), std::move(bias), eps), grid_(grid) {}

std::string GridLayerNorm::type_name() const { return grid_type_name(grid_, "LayerNorm"); }

// x: [R, ..., H / f] -> same
Tensor GridLayerNorm::forward(const Tensor& x) {
  const auto& L = grid_.layout();
  return grid_layer_norm(x, dist::reduce_backward(weight, *L.rows), dist::reduce_backward(bias, *L.rows), eps(),
                         *L.feature);
}

std::shared_ptr<Module> GridLayerNorm::fresh() const {
  return std::make_shared<GridLayerNorm>(empty_as(weight), empty_as(bias), eps(), grid_);
}

std::shared_ptr<Linear> GridClassifier::from_native_module(const std::shared_ptr<Module>& native,
                                                           const TensorGrid& grid) {
  if (auto done = std::dynamic_pointer_cast<GridClassifier>(native)) return done;
  const std::string who = grid_type_name(grid, "Classifier");
  auto [w, b] = linear_handles(native, who);
  const auto& L = grid.layout();
  shard_parameter_blocks(w, {{1, {L.feature_block(), L.feature_blocks()}}}, who + " weight (" + grid.describe() + ")");
  return std::make_shared<GridClassifier>(w, b, grid);
}

GridClassifier::GridClassifier(Tensor weight, Tensor bias, const TensorGrid& grid)
    : Linear(weight.defined() ? weight : Tensor::empty({1, 1}), bias), grid_(grid) {
  if (!weight.defined()) replace_tensor("weight", Tensor());
}

std::string GridClassifier::type_name() const { return grid_type_name(grid_, "Classifier"); }

// x: [R, H / f] -> [B, C] (every row, on every rank)
Tensor GridClassifier::forward(const Tensor& x) {
  BOOSTER_CHECK(weight.defined(), type_name(), ": this rank released the layer (another pipeline stage holds it)");
  const auto& L = grid_.layout();
  Tensor logits = dist::reduce_forward(linear(x, dist::reduce_backward(weight, *L.rows)), *L.feature);
  if (bias.defined()) logits = add(logits, dist::reduce_backward(bias, *L.rows).to(logits.dtype()));
  logits = dist::gather_forward_split_backward(logits, 0, *L.rows);
  const int64_t rows = grid_.rows_in_flight();
  return rows >= 0 && rows < logits.size(0) ? logits.narrow(0, 0, rows) : logits;
}

std::shared_ptr<Module> GridClassifier::fresh() const {
  return std::make_shared<GridClassifier>(empty_as(weight), empty_as(bias), grid_);
}

std::shared_ptr<UnaryModule> GridPatchProjection::from_native_module(const std::shared_ptr<Module>& native,
                                                                     const TensorGrid& grid) {
  if (auto done = std::dynamic_pointer_cast<GridPatchProjection>(native)) return done;
  const std::string who = grid_type_name(grid, "PatchEmbedding");
  auto* conv = dynamic_cast<Conv2d*>(native.get());
  BOOSTER_CHECK(conv != nullptr, who, ".from_native_module: expects a Conv2d, got a ",
                native ? native->type_name() : "null module");
  const auto& L = grid.layout();
  Tensor w = conv->weight.get(), b = conv->bias.defined() ? conv->bias.get() : Tensor();
  shard_parameter_blocks(w, {{0, {L.feature_block(), L.feature_blocks()}}}, who + " weight (" + grid.describe() + ")");
  shard_parameter_blocks(b, {{0, {L.feature_block(), L.feature_blocks()}}}, who + " bias (" + grid.describe() + ")");
  return std::make_shared<GridPatchProjection>(w, b, conv->stride(), conv->padding(), grid);
}

GridPatchProjection::GridPatchProjection(Tensor w, Tensor b, std::pair<int64_t, int64_t> stride,
                                         std::pair<int64_t, int64_t> padding, const TensorGrid& grid)
    : stride_(stride), padding_(padding), grid_(grid) {
  weight = register_parameter("weight", w);
  bias = register_parameter("bias", b);
}

std::string GridPatchProjection::type_name() const { return grid_type_name(grid_, "PatchEmbedding"); }

// x: [B, C, H, W] -> [B / row_blocks, E / f, H', W']
Tensor GridPatchProjection::forward(const Tensor& x) {
  BOOSTER_CHECK(!x.requires_grad(), type_name(), ": the images take no gradient here (each rank convolves only its "
                "rows); detach them");
  BOOSTER_CHECK_T(ShapeError, x.dim() == 4, type_name(), ": expects images [B, C, H, W], got ", shape_str(x.shape()));
  const auto& L = grid_.layout();
  const int64_t n = L.row_blocks(), rows = x.dim() ? x.size(0) : 0;
  Tensor all = x;
  grid_.set_rows_in_flight(-1);
  if (grid_.pad_rows() && rows % n != 0) {
    Shape pad = x.shape();
    pad[0] = n - rows % n;
    all = concat({x, Tensor::zeros(pad, x.dtype())}, 0);
    grid_.set_rows_in_flight(rows);
  }
  return conv2d(grid_rows(all, grid_), dist::reduce_backward(weight, *L.rows),
                bias.defined() ? dist::reduce_backward(bias, *L.rows) : Tensor(), stride_, padding_);
}

std::shared_ptr<Module> GridPatchProjection::fresh() const {
  return std::make_shared<GridPatchProjection>(empty_as(weight), empty_as(bias), stride_, padding_, grid_);
}

}  // namespace booster::nn
