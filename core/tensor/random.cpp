// Counter-based generator and its tensor fills.
#include "core/tensor/random.h"

#include <cmath>
#include <vector>

#include "core/tensor/lazy.h"

namespace booster {

namespace {
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline double to_unit(uint64_t v) { return double(v >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

void Generator::manual_seed(uint64_t seed, uint64_t stream) {
  state_ = {seed, stream, 0};
  key_ = mix64(seed * kGamma + mix64(stream + 0x632BE59BD9B4E019ull));
}

uint64_t Generator::at(uint64_t counter) const { return mix64(key_ + (counter + 1) * kGamma); }
uint64_t Generator::next_u64() { return at(advance(1)); }
double Generator::next_double() { return to_unit(next_u64()); }

Draw Generator::reserve(Draw::Kind kind, int64_t numel, double p0, double p1, double p2, double p3) {
  Draw d{kind, p0, p1, p2, p3, state_};
  advance((kind == Draw::Kind::normal ? 2 : 1) * uint64_t(numel));  // Box-Muller takes two counters an element
  return d;
}

namespace {
// Applies a draw: to the tensor's own data, or, when the tensor is lazy, kept as its recipe.
void apply_draw(Tensor& t, const Draw& d) {
  if (lazy_record_draw(t, d)) return;
  fill_draw(t, d, {{0, t.numel(), 0}});
}
}  // namespace

void Generator::uniform_(Tensor& t, double lo, double hi) { apply_draw(t, reserve(Draw::Kind::uniform, t.numel(), lo, hi)); }

void Generator::normal_(Tensor& t, double mean, double std) {
  apply_draw(t, reserve(Draw::Kind::normal, t.numel(), mean, std));
}

void Generator::trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  BOOSTER_CHECK(std > 0 && a < b, "trunc_normal_: need std > 0 and a < b, got std=", std, " a=", a, " b=", b);
  apply_draw(t, reserve(Draw::Kind::trunc_normal, t.numel(), mean, std, a, b));
}

void Generator::bernoulli_(Tensor& t, double p) { apply_draw(t, reserve(Draw::Kind::bernoulli, t.numel(), p)); }

namespace {
// value i of the runs' logical elements = f(i), written at the runs' local positions.
template <typename F>
void fill_runs(Tensor& local, const std::vector<Run>& runs, F&& f) {
  const int64_t n = local.numel();
  std::vector<float> v(static_cast<size_t>(n));
  for (const Run& r : runs) {
    BOOSTER_CHECK_T(ShapeError, r.local >= 0 && r.local + r.length <= n, "random fill: a run of ", r.length,
                    " elements at ", r.local, " does not fit a tensor of ", n);
#pragma omp parallel for schedule(static) if (r.length > (1 << 14))
    for (int64_t j = 0; j < r.length; ++j) v[size_t(r.local + j)] = float(f(uint64_t(r.start + j)));
  }
  local.copy_(Tensor::from_vector(v, local.shape(), DType::f32));
}
}  // namespace

void fill_draw(Tensor& local, const Draw& d, const std::vector<Run>& runs) {
  BOOSTER_CHECK_T(DTypeError, is_floating(local.dtype()), "random fill: tensor must be floating, got ",
                  dtype_name(local.dtype()));
  const Generator g(d.at.seed, d.at.stream);
  const uint64_t base = d.at.counter;
  switch (d.kind) {
    case Draw::Kind::uniform:
      return fill_runs(local, runs, [&](uint64_t i) { return d.p0 + (d.p1 - d.p0) * to_unit(g.at(base + i)); });
    case Draw::Kind::normal:
      return fill_runs(local, runs, [&](uint64_t i) {
        const double u1 = 1.0 - to_unit(g.at(base + 2 * i));  // (0, 1]
        const double u2 = to_unit(g.at(base + 2 * i + 1));
        return d.p0 + d.p1 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      });
    case Draw::Kind::trunc_normal: {
      auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
      const double l = cdf((d.p2 - d.p0) / d.p1), u = cdf((d.p3 - d.p0) / d.p1);
      return fill_runs(local, runs, [&](uint64_t i) {
        const double p = (2 * l - 1) + (2 * u - 1 - (2 * l - 1)) * to_unit(g.at(base + i));
        const double x = erfinv(p) * d.p1 * std::sqrt(2.0) + d.p0;
        return std::min(std::max(x, d.p2), d.p3);
      });
    }
    case Draw::Kind::bernoulli:
      return fill_runs(local, runs, [&](uint64_t i) { return to_unit(g.at(base + i)) < d.p0 ? 1.0 : 0.0; });
  }
}

namespace {
thread_local Generator* t_default = nullptr;
}

Generator& default_generator() {
  static Generator g(0, 0);
  return t_default ? *t_default : g;
}

DefaultGeneratorGuard::DefaultGeneratorGuard(Generator& g) : prev_(t_default) { t_default = &g; }
DefaultGeneratorGuard::~DefaultGeneratorGuard() { t_default = prev_; }

void manual_seed(uint64_t seed, uint64_t stream) { default_generator().manual_seed(seed, stream); }

double erfinv(double x) {
  if (x <= -1.0) return -INFINITY;
  if (x >= 1.0) return INFINITY;
  // Giles (2010) single-precision approximation, then Newton steps on erf in double.
  double w = -std::log((1.0 - x) * (1.0 + x)), r;
  if (w < 5.0) {
    w -= 2.5;
    r = 2.81022636e-08;
    r = 3.43273939e-07 + r * w;
    r = -3.5233877e-06 + r * w;
    r = -4.39150654e-06 + r * w;
    r = 0.00021858087 + r * w;
    r = -0.00125372503 + r * w;
    r = -0.00417768164 + r * w;
    r = 0.246640727 + r * w;
    r = 1.50140941 + r * w;
  } else {
    w = std::sqrt(w) - 3.0;
    r = -0.000200214257;
    r = 0.000100950558 + r * w;
    r = 0.00134934322 + r * w;
    r = -0.00367342844 + r * w;
    r = 0.00573950773 + r * w;
    r = -0.0076224613 + r * w;
    r = 0.00943887047 + r * w;
    r = 1.00167406 + r * w;
    r = 2.83297682 + r * w;
  }
  r *= x;
  for (int k = 0; k < 2; ++k) r -= (std::erf(r) - x) / (2.0 / std::sqrt(M_PI) * std::exp(-r * r));
  return r;
}

}  // namespace booster
