// pipeline_bench: the pipeline bubble, measured. For each schedule (1F1B; interleaved with
// 2 model chunks; zero bubble V, "zbv") and number of micro-batches M, a ViT training step
// through execute_pipeline on S = world-size stages: its time against the time the stage
// computed (the rest it waited for other stages), beside the schedule's theory
//   1F1B: step / compute = (M + S - 1) / M;   interleaved (C chunks): 1 + (S - 1) / (C M);
//   zbv: the step its simulation of the measured F, B and W costs predicts, over 2 M (F + B + W);
// and the activation memory each stage held at most (1F1B keeps at most S - stage
// micro-batches in flight: the first stage S, the last 1). Table on rank 0, JSON lines.
//   mpirun -np 2 pipeline_bench --model vit-small --microbatches 4,8,16 --microbatch-size 2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/kernels/ops.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "peer.h"
#include "plugins/hybrid_parallel/hybrid_parallel_plugin.h"

using namespace booster;

namespace {

double max_over_ranks(double v) { return dist::all_reduce_scalar(v, dist::ReduceOp::max); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pipeline bubble and activation memory per stage"};
  std::string preset = "vit-small", styles = "1f1b,interleaved", microbatches = "4,8,16", precision = "fp32";
  int mbs = 2, steps = 2;
  app.add_option("--model", preset, "vit-tiny, vit-small or vit-base");
  app.add_option("--styles", styles, "comma-separated: 1f1b, interleaved, zbv");
  app.add_option("--microbatches", microbatches, "comma-separated numbers of micro-batches");
  app.add_option("--microbatch-size", mbs, "rows per micro-batch");
  app.add_option("--precision", precision, "fp32, bf16 or fp16");
  app.add_option("--steps", steps, "timed steps (the median is reported)");
  CLI11_PARSE(app, argc, argv);
  dist::launch_from_openmpi();
  const int S = dist::world_size();
  const bool master = dist::world_rank() == 0;
  if (master)
    std::printf("%-12s %4s %4s | %9s %8s | %10s %10s %8s | %8s %s\n", "schedule", "S", "M", "step ms", "img/s",
                "step/comp", "theory", "ratio", "sync ms", "in flight / act MB per stage");
  for (const auto& style : bench::split_list(styles)) {
    const int C = style == "1f1b" ? 1 : 2;
    for (const auto& m_str : bench::split_list(microbatches)) {
      const int64_t M = std::stoll(m_str);
      plugins::HybridParallelOptions o;
      o.pp_size = S, o.zero.precision = precision, o.num_microbatches = M, o.pp_style = style, o.num_model_chunks = C;
      auto plugin = std::make_shared<plugins::HybridParallelPlugin>(o);
      nn::ViTConfig c = nn::ViTConfig::preset(preset);
      c.num_labels = 3;
      manual_seed(1);
      auto model = std::make_shared<nn::ViTForImageClassification>(c);
      Booster booster(plugin);
      auto b = booster.boost(model, std::make_shared<optim::HybridAdam>(model->named_parameters()));
      Tensor x = Tensor::empty({M * mbs, 3, c.image_size, c.image_size});
      Generator(7).normal_(x);
      Tensor y = Tensor::zeros({M * mbs}, DType::i64);
      const StageCriterion ce = on_keys([](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); });
      std::vector<double> step_s, ratio;
      pipeline::PipelineStepStats last;
      for (int i = 0; i <= steps; ++i) {  // the first is a warm-up
        b.optimizer->zero_grad();
        dist::barrier();
        booster.execute_pipeline(single_batch({{"pixel_values", x}, {"labels", y}}), *b.model, ce, b.optimizer.get());
        b.optimizer->step();
        last = *plugin->pipeline_stats();
        if (i == 0) continue;
        // The slowest stage sets the step; its compute is what it did not spend waiting.
        const double pipe_s = last.seconds - last.sync_seconds;
        step_s.push_back(max_over_ranks(pipe_s));
        ratio.push_back(max_over_ranks(pipe_s / std::max(1e-9, pipe_s - last.wait_seconds)));
      }
      const double t = bench::median(step_s), r = bench::median(ratio);
      double theory = 1.0 + double(S - 1) / double(C * M);
      if (auto* zbv = dynamic_cast<const pipeline::ZeroBubbleVSchedule*>(plugin->pipeline_schedule())) {
        const pipeline::ZeroBubbleCosts c = zbv->costs().value();
        double makespan = 0;
        pipeline::zero_bubble_v_orders(S, M, c, 2 * S, &makespan);
        theory = makespan / (double(M) * 2 * (c.f + c.b + c.w));
      }
      std::string per_stage;
      auto in_flight = dist::all_gather_bytes(std::to_string(last.peak_in_flight) + "/" +
                                              std::to_string(int(double(last.peak_activation_bytes) / (1 << 20))));
      for (auto& v : in_flight) per_stage += (per_stage.empty() ? "" : "  ") + v;
      const double sync_ms = 1e3 * max_over_ranks(last.sync_seconds);
      if (!master) continue;
      std::printf("%-12s %4d %4lld | %9.1f %8.2f | %10.3f %10.3f %8.3f | %8.1f %s\n", style.c_str(), S, (long long)M,
                  1e3 * t, double(M * mbs) / t, r, theory, r / theory, sync_ms, per_stage.c_str());
      nlohmann::json j{{"schedule", style}, {"stages", S}, {"microbatches", M}, {"microbatch_size", mbs},
                       {"model", preset}, {"precision", precision}, {"step_ms", 1e3 * t},
                       {"images_per_s", double(M * mbs) / t}, {"step_over_compute", r}, {"theory", theory},
                       {"in_flight_and_activation_mb_per_stage", in_flight}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
