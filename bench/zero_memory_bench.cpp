// zero_memory_bench: per-rank model-state bytes of a ViT under ZeRO stage 1, stage 2,
// stage 2 with cpu_offload and Gemini (and DDP with Booster's bf16, for reference),
// measured by the allocator once activations are gone (after the second step, before
// zero_grad), beside the theory of the partition:
//   stage 1: working parameters and gradients in full, fp32 masters and Adam's two states
//            of this rank's chunks (chunks of ceil(numel / dp) elements: about 1 / dp);
//   stage 2: the gradients as fp32 chunks too;
//   offload: masters and Adam states on disk (counted by the "disk" tier), not in RAM;
//   gemini (ZeRO-3): the working parameters as this rank's slices too (every chunk sharded);
//            with offload_param_frac, the slices and the gradient chunks on disk as well.
// Exits 1 when a measurement is more than 5 % off its theory.
//   mpirun -np {1,2,4} zero_memory_bench [vit-base] [bf16]
#include <cmath>
#include <cstdio>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/offload_store.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "plugins/low_level_zero/low_level_zero_plugin.h"
#include "plugins/registry.h"

using namespace booster;

namespace {

struct Row {
  std::string name;
  double measured_mb, theory_mb, disk_mb;
};

double mb(double bytes) { return bytes / (1 << 20); }

Row measure(const std::string& name, const std::string& plugin_toml, const std::string& mixed, const std::string& preset,
            const std::string& precision) {
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  Tensor x = Tensor::empty({1, 3, c.image_size, c.image_size});
  Generator(uint64_t(dist::world_rank())).normal_(x);
  Tensor y = Tensor::zeros({1}, DType::i64);
  const size_t base = host_tier().bytes_in_use(), disk_base = disk_tier().bytes_in_use();
  double theory = 0;
  {
    auto model = std::make_shared<nn::ViTForImageClassification>(c);
    Booster booster(plugins::make_plugin(Config::from_string(plugin_toml)), mixed);
    auto b = booster.boost(model, std::make_shared<optim::HybridAdam>(model->named_parameters()));
    for (int s = 0; s < 2; ++s) {
      b.optimizer->zero_grad();
      booster.backward(b.model(x, y).loss, *b.optimizer);
      b.optimizer->step();
    }
    host_tier().empty_cache();
    const size_t used = host_tier().bytes_in_use() - base;
    const double w = precision == "fp32" ? 4 : 2;
    if (auto* z = b.optimizer->find<plugins::LowLevelZeroOptimizer>()) {
      double params = 0, held = 0, in_ram = 0, grads_in_ram = 0;
      auto& eng = z->engine();
      const auto& zp = eng.layout();
      for (size_t i = 0; i < zp.parts().size(); ++i) {
        const auto& p = zp.parts()[i];
        const auto& s = eng.shards().at(i);
        params += double(p.numel);
        held += s.own_slot >= 0 ? 0.0 : eng.gatherer().is_sharded(zp.bucket_of(i)) ? double(p.n) : double(p.numel);  // Gemini: slices only
        if (!s.offloaded) in_ram += double(p.n);
        if (!eng.grads().on_disk(i)) grads_in_ram += double(p.n);
      }
      theory = held * w                                              // working parameters
               + (eng.grads().stage() == 1 ? params * w : grads_in_ram * 4)  // gradients: full, or fp32 chunks
               + in_ram * 4 * 3;                                     // masters, exp_avg, exp_avg_sq not offloaded
    } else {  // DDP with Booster's mixed precision: everything in full, plus the reducer's fp32 buckets
      double params = 0;
      for (auto& p : model->parameters()) params += double(p.numel());
      theory = params * (w + w + 4 * 3 + 4);
    }
    const double measured = dist::all_reduce_scalar(double(used), dist::ReduceOp::max);
    const double disk = dist::all_reduce_scalar(double(disk_tier().bytes_in_use() - disk_base), dist::ReduceOp::max);
    theory = dist::all_reduce_scalar(theory, dist::ReduceOp::max);
    return {name, mb(measured), mb(theory), mb(disk)};
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::launch_from_openmpi();
  const std::string preset = argc > 1 ? argv[1] : "vit-base", precision = argc > 2 ? argv[2] : "bf16";
  const std::string zero = "[plugin]\nname = 'low_level_zero'\nprecision = '" + precision + "'\n";
  // Chunks of about 1 M elements (several per ViT), every chunk sharded.
  const std::string gemini = "[plugin]\nname = 'gemini'\nprecision = '" + precision +
                             "'\nmin_chunk_size_m = 1\nsearch_range_m = 1\n";
  std::vector<Row> rows{
      measure("ddp + " + precision, "[plugin]\nname = 'torch_ddp'\n", precision == "fp32" ? "" : precision, preset,
              precision),
      measure("zero1", zero + "stage = 1\n", "", preset, precision),
      measure("zero2", zero + "stage = 2\n", "", preset, precision),
      measure("zero2 + cpu_offload", zero + "stage = 2\ncpu_offload = true\n", "", preset, precision),
      measure("gemini (zero3)", gemini, "", preset, precision),
      measure("gemini + offload_optim", gemini + "offload_optim_frac = 1.0\n", "", preset, precision),
      measure("gemini + offload_optim 0.5", gemini + "offload_optim_frac = 0.5\n", "", preset, precision),
      measure("gemini + offload all", gemini + "offload_optim_frac = 1.0\noffload_param_frac = 1.0\n", "", preset,
              precision),
  };
  int bad = 0;
  if (dist::world_rank() == 0) {
    std::printf("%s %s, dp %d: model-state bytes per rank (largest rank), allocator vs theory\n", preset.c_str(),
                precision.c_str(), dist::world_size());
    std::printf("%-24s %12s %12s %8s %12s\n", "config", "measured MB", "theory MB", "ratio", "disk MB");
  }
  for (auto& r : rows) {
    // Nothing in RAM in theory (everything offloaded): within 1 MB, the ratio is undefined.
    const double ratio = r.theory_mb > 0 ? r.measured_mb / r.theory_mb : (r.measured_mb < 1.0 ? 1.0 : INFINITY);
    const bool zero_row = r.name.rfind("zero", 0) == 0 || r.name.rfind("gemini", 0) == 0;
    const bool off = zero_row && !(std::abs(ratio - 1) <= 0.05);
    if (off) ++bad;
    if (dist::world_rank() == 0)
      std::printf("%-24s %12.1f %12.1f %8.3f %12.1f%s\n", r.name.c_str(), r.measured_mb, r.theory_mb, ratio, r.disk_mb,
                  off ? "  <- more than 5 % off" : "");
  }
  return bad ? 1 : 0;
}
