// Tensor-parallel cost formulas of the ViT (see tp_formulas.h).
#include "tp_formulas.h"

#include <cmath>

#include "nn/parallel/grid.h"

namespace booster::examples {

namespace {
constexpr double kS = 4;  // fp32
double ring(double p) { return p > 1 ? (p - 1) / p : 0; }

TpFormula one_d(const nn::ViTConfig& c, double n, double b, double p) {
  const double h = double(c.hidden_size), i = double(c.intermediate_size), cl = double(c.num_labels);
  const double t = double(c.num_patches() + 1), e = h, layers = double(c.num_hidden_layers);
  const double patch = double(c.num_channels * c.patch_size * c.patch_size);
  TpFormula f;
  // q, k, v, intermediate column-parallel (weight and bias split), the output projections
  // row-parallel (bias whole), layer norms and embeddings whole.
  const double layer = (4 * h * h + 2 * h * i) / p + (3 * h + i) / p + 2 * h + 4 * h;
  const bool split_head = cl > 0 && std::fmod(cl, p) == 0;
  f.param_bytes = kS * (layers * layer + e * patch + e + e + t * e + 2 * h + (split_head ? (cl * h + cl) / p : cl * h + cl));
  // Forward: the two row-parallel outputs all-reduced; backward: the input gradients of q, k,
  // v and intermediate (each its own all-reduce).
  f.comm_bytes = kS * layers * 6 * 2 * ring(p) * n * h;
  if (split_head) f.comm_bytes += kS * (ring(p) * b * cl + 2 * ring(p) * b * h);
  return f;
}

// 2D / 2.5D (q, depth) and 3D (d): rb row blocks, f feature blocks.
TpFormula grid(const nn::ViTConfig& c, double n, double b, const std::string& mode, double q, double depth) {
  const bool cube = mode == "3d";
  const double rb = cube ? q * q : q * depth, f = q, r = n / rb, wb = cube ? q * q * q : q * q;
  const double h = double(c.hidden_size), i = double(c.intermediate_size), cl = double(c.num_labels);
  const double t = double(c.num_patches() + 1), layers = double(c.num_hidden_layers);
  const double patch = double(c.num_channels * c.patch_size * c.patch_size);
  auto linear = [&](double out, double in) {
    double bytes = 0;
    if (cube) {
      bytes = ring(q) * (3 * r * in + 2 * r * out + 3 * out * in / (q * q));
    } else {
      bytes = 3 * ring(q) * r * in + 3 * ring(q) * out * in / q + 2 * ring(depth) * out * in / (q * q);
    }
    return bytes + 2 * ring(rb) * out / f;  // the bias's gradient over the rows' blocks
  };
  auto norm = [&] { return 2 * ring(f) * 4 * r + 2 * 2 * ring(rb) * h / f; };  // statistics + affine
  const double per_layer = 4 * linear(h, h) + linear(i, h) + linear(h, i) + 2 * norm();
  TpFormula out;
  const double embed = (h * patch + h + h + t * h) / f;
  out.param_bytes = kS * (layers * ((4 * h * h + 2 * h * i) / wb + (5 * h + i) / f + 4 * h / f) + embed + 2 * h / f +
                          cl * h / f + cl);
  out.comm_bytes = kS * (layers * per_layer + norm() + 2 * ring(rb) * embed + 2 * ring(f) * b / rb * cl +
                         2 * ring(rb) * (cl * h / f + cl) + ring(rb) * b * cl);
  return out;
}
}  // namespace

TpFormula tp_formula(const nn::ViTConfig& c, int64_t batch, const std::string& mode, int tp, int depth) {
  const double b = double(batch), n = b * double(c.num_patches() + 1);
  if (mode == "1d") return one_d(c, n, b, tp);
  return grid(c, n, b, mode, nn::TensorGrid::edge(mode, tp, depth), depth);
}

}  // namespace booster::examples
