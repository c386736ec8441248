// Initializers drawing from the default generator.
#include "nn/init.h"

#include <cmath>

#include "core/autograd/grad_mode.h"
#include "nn/module.h"

namespace booster::nn::init {

void trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  if (SkipInitGuard::active()) return;
  NoGradGuard ng;
  default_generator().trunc_normal_(t, mean, std, a, b);
}

void normal_(Tensor& t, double mean, double std) {
  if (SkipInitGuard::active()) return;
  NoGradGuard ng;
  default_generator().normal_(t, mean, std);
}

void uniform_(Tensor& t, double lo, double hi) {
  if (SkipInitGuard::active()) return;
  NoGradGuard ng;
  default_generator().uniform_(t, lo, hi);
}

void zeros_(Tensor& t) {
  NoGradGuard ng;
  t.zero_();
}

void ones_(Tensor& t) {
  NoGradGuard ng;
  t.fill_(1.0);
}

void default_layer_init_(Tensor& weight, Tensor* bias, int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
  uniform_(weight, -bound, bound);
  if (bias && bias->defined()) uniform_(*bias, -bound, bound);
}

}  // namespace booster::nn::init
