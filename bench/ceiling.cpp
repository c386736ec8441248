// RawMatmul (see ceiling.h).
#include "ceiling.h"

#include <algorithm>
#include <chrono>

#include "core/kernels/dnnl_util.h"
#include "core/tensor/random.h"

namespace booster::bench {

namespace {
Tensor filled(const Shape& s, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  Generator(seed).uniform_(t, -0.5, 0.5);
  return t.to(dt);
}
}  // namespace

RawMatmul::RawMatmul(int64_t m, int64_t k, int64_t n, DType dt) : m_(m), k_(k), n_(n) {
  using dnnl::memory;
  auto ddt = kernels::dnnl_type(dt);
  memory::desc a({m, k}, ddt, memory::format_tag::ab), b({k, n}, ddt, memory::format_tag::any),
      c({m, n}, memory::data_type::f32, memory::format_tag::ab);
  try {
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), kernels::cpu_engine());
  } catch (const dnnl::error&) {
    return;
  }
  prim_ = dnnl::matmul(pd_);
  a_ = filled({m, k}, dt, 1);
  c_ = Tensor::empty({m, n});
  Tensor plain = filled({k, n}, dt, 2);
  b_mem_ = memory(pd_.weights_desc(), kernels::cpu_engine());
  memory src(memory::desc({k, n}, ddt, memory::format_tag::ab), kernels::cpu_engine(), plain.raw_data());
  dnnl::reorder(src, b_mem_).execute(kernels::cpu_stream(), src, b_mem_);
  kernels::cpu_stream().wait();
  ok_ = true;
}

std::string RawMatmul::impl() const { return ok_ ? pd_.impl_info_str() : "none"; }

double RawMatmul::run_seconds() {
  auto t0 = std::chrono::steady_clock::now();
  prim_.execute(kernels::cpu_stream(),
                {{DNNL_ARG_SRC, dnnl::memory(pd_.src_desc(), kernels::cpu_engine(), a_.raw_data())},
                 {DNNL_ARG_WEIGHTS, b_mem_},
                 {DNNL_ARG_DST, dnnl::memory(pd_.dst_desc(), kernels::cpu_engine(), c_.raw_data())}});
  kernels::cpu_stream().wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double RawMatmul::gflops(int reps) {
  run_seconds();
  double best = run_seconds();
  for (int i = 1; i < reps; ++i) best = std::min(best, run_seconds());
  return 2.0 * double(m_) * double(k_) * double(n_) / best / 1e9;
}

}  // namespace booster::bench
