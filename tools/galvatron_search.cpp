// galvatron_search: Galvatron's search on this machine's profiles. For a model profiled by
// galvatron_profile_model and a world profiled by galvatron_profile_hardware, it weighs every
// pipeline degree, vocab degree and micro-batch count with the layerwise dynamic program
// under a per-rank memory budget, prints each candidate (strategy, predicted ms, predicted
// MB), and writes the fastest plan that fits as the strategy JSON GalvatronPlugin runs
// (galvatron_config_path), named as Galvatron names it.
//   galvatron_search --model vit-small --world 4 --memory-mb 2000 --global-batch 32 --profiles profiles/
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "core/common/check.h"
#include "nn/vit_config.h"
#include "galvatron/search.h"

using namespace booster;
namespace gv = booster::galvatron;

namespace {
void print(const char* title, const std::vector<gv::Candidate>& cs, int world, size_t limit) {
  std::printf("%s\n%-4s %-4s %-6s %12s %12s %5s  %s\n", title, "pp", "vtp", "chunks", "step ms", "MB / rank", "fits",
              "layers");
  for (size_t i = 0; i < cs.size() && i < limit; ++i) {
    const auto& c = cs[i];
    const std::string vtp = std::to_string(c.plan.vtp) + (c.plan.vsp && c.plan.vtp > 1 ? "sp" : "");
    std::printf("%-4d %-4s %-6lld %12.1f %12.1f %5s  %s\n", c.plan.pp_deg, vtp.c_str(), (long long)c.plan.chunks,
                c.cost.step_ms, c.cost.memory_mb, c.fits ? "yes" : "no", c.plan.summary(world).c_str());
  }
}
// One line a plan: what the cost model predicts for it (its global_bsz, or the search's).
int predict_plans(const gv::CostModel& cm, const std::vector<std::string>& paths, const gv::SearchOptions& o, int world) {
  for (auto& path : paths) {
    gv::HybridPlan p = gv::HybridPlan::from_json_file(path);
    if (p.global_bsz == 0) p.global_bsz = o.global_bsz;
    p.validate(world, o.num_layers);
    const auto c = cm.cost(p);
    // The largest stage's peak, by part and where it falls.
    const gv::StageCost* top = &c.stages.front();
    for (const auto& st : c.stages) if (st.memory_mb > top->memory_mb) top = &st;
    std::string parts;
    for (const auto& [name, mb] : top->parts.named()) parts += ", \"" + std::string(name) + "\": " + std::to_string(mb);
    std::printf("{\"plan\": \"%s\", \"layers\": \"%s\", \"predicted_ms\": %.2f, \"predicted_mb\": %.1f, "
                "\"peak_at\": \"%s\", \"predicted_parts_mb\": {%s}}\n",
                path.c_str(), p.summary(world).c_str(), c.step_ms, c.memory_mb, top->peak_at, parts.substr(2).c_str());
  }
  return 0;
}

// Every global plan, printed, and those that fit written to `dir` (to run them all).
void weigh_globals(const gv::CostModel& cm, const gv::SearchOptions& o, int world, const std::string& dir) {
  const auto globals = gv::global_plans(cm, o);
  print("\nglobal plans:", globals, world, 1000);
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < globals.size(); ++i)
    if (globals[i].fits) globals[i].plan.write_json((std::filesystem::path(dir) / ("global_" + std::to_string(i) + ".json")).string());
}

// Galvatron's name for the best plan's file, in the profiles folder.
std::string default_output(const std::string& profiles, const std::string& model, int nodes, int world,
                           const gv::SearchOptions& o, const std::string& precision) {
  return (std::filesystem::path(profiles) /
          ("galvatron_config_" + model + "_" + std::to_string(nodes) + "nodes_" + std::to_string(world / nodes) +
           "gpus_per_node_" + std::to_string(int64_t(o.memory_mb)) + "MB_" + precision + "_bsz" +
           std::to_string(o.global_bsz) + ".json")).string();
}

// The best candidate written as a strategy JSON, with what it is predicted to cost.
void write_best(const gv::Candidate& c, const gv::SearchOptions& o, const gv::ModelProfile& mp, int world,
                const std::string& output) {
  gv::HybridPlan best = c.plan;
  best.world_size = world;
  best.write_json(output);
  std::printf("\nbest: %s; predicted %.1f ms a step (%.1f samples/s), %.1f MB a rank of %.0f\nwrote %s\n",
              best.summary(world).c_str(), c.cost.step_ms, double(o.global_bsz) / c.cost.step_ms * 1e3,
              c.cost.memory_mb, o.memory_mb, output.c_str());
  if (mp.sequence_parallel)
    std::printf("the model was profiled with Megatron's sequence parallelism: run the plan with [plugin] "
                "sequence_parallel = true\n");
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Galvatron's search: the fastest layerwise plan under a memory budget"};
  gv::SearchOptions o;
  std::string model = "vit-small", precision = "bf16", profiles = "galvatron_profiles", output;
  int world = 0, nodes = 1;
  int64_t layers = 0;
  bool no_ckpt = false, no_sdp = false, no_consec_off = false, no_vtp = false, show_global = false;
  app.add_option("--model", model, "the profiled model (a ViT preset name)")->required();
  app.add_option("--world", world, "ranks")->required();
  app.add_option("--memory-mb", o.memory_mb, "a rank's memory budget (MB)")->required();
  app.add_option("--global-batch", o.global_bsz, "the global batch")->required();
  app.add_option("--layers", layers, "transformer layers (default: the preset's)");
  app.add_option("--nodes", nodes, "nodes (the hardware profile's file names)");
  app.add_option("--precision", precision, "fp32, bf16 or fp16 (the model profile's)");
  app.add_option("--profiles", profiles, "folder of the profile files");
  app.add_option("--max-tp", o.max_tp, "largest tensor-parallel degree (0: a stage)");
  app.add_option("--max-pp", o.max_pp, "largest pipeline degree (0: the world)");
  app.add_option("--max-chunks", o.max_chunks, "most micro-batches with a pipeline");
  app.add_option("--partition-spread", o.partition_spread,
                 "stage partitions weighed: each stage within this many layers of the even split (0: even only)");
  app.add_option("--sp-space", o.sp_space, "tp, sp or tp+sp: tensor parallelism, Ulysses or both at degrees > 1")
      ->check(CLI::IsMember({"tp", "sp", "tp+sp"}));
  app.add_option("--default-dp-type", o.default_dp_type, "ddp or zero2");
  app.add_option("--pipeline-type", o.pipeline_type, "pipedream_flush or gpipe");
  app.add_flag("--disable-ckpt", no_ckpt, "no checkpointed layers");
  app.add_flag("--disable-sdp", no_sdp, "no ZeRO-3 layers");
  app.add_flag("--disable-tp-consec", no_consec_off, "consecutive tensor-parallel groups only");
  app.add_flag("--disable-vtp", no_vtp, "the embeddings and head at tp 1");
  app.add_flag("--global", show_global, "also weigh every global plan (one strategy for all layers)");
  std::string global_dir;
  app.add_option("--global-dir", global_dir, "with --global: write every global plan that fits there (to run them all)");
  app.add_option("--output", output, "the strategy JSON (default: Galvatron's name, in the profiles folder)");
  std::vector<std::string> predict;
  app.add_option("--predict", predict, "strategy JSONs to cost instead of searching (their global_bsz, or --global-batch)");
  CLI11_PARSE(app, argc, argv);
  try {
    o.checkpoint = !no_ckpt, o.sdp = !no_sdp, o.tp_consec_off = !no_consec_off, o.vtp = !no_vtp;
    const nn::ViTConfig vc = nn::ViTConfig::preset(model);
    o.num_layers = layers > 0 ? layers : vc.num_hidden_layers;
    const auto hw = gv::HardwareProfile::read(profiles, nodes, world / nodes);
    const auto mp = gv::ModelProfile::read(profiles, precision, model);
    if (mp.max_tp > 0 && (o.max_tp == 0 || o.max_tp > mp.max_tp)) {  // the profiler knows which degrees exist
      if (o.max_tp > mp.max_tp || mp.max_tp < world)
        std::printf("tensor parallelism up to %d: the model profile of %s allows no more (its attention heads)\n",
                    mp.max_tp, model.c_str());
      o.max_tp = mp.max_tp;
    }
    BOOSTER_CHECK(o.sp_space == "tp" || mp.has_sp(), "--sp-space ", o.sp_space, ": the model profile of ", model, " in ",
                  profiles, " has no Ulysses figures (layertype_0_sp*); profile it again with galvatron_profile_model");
    const gv::CostModel cm(hw, mp, world, precision);
    if (!predict.empty()) return predict_plans(cm, predict, o, world);
    const auto found = gv::search(cm, o);
    print("layerwise candidates (the dynamic program's plan for each pipeline degree, vocab degree and chunks):", found,
          world, found.size());
    if (show_global) weigh_globals(cm, o, world, global_dir);
    if (found.empty() || !found.front().fits) {
      std::fprintf(stderr, "no plan fits %.0f MB a rank at global batch %lld on %d ranks\n", o.memory_mb,
                   (long long)o.global_bsz, world);
      return 2;
    }
    write_best(found.front(), o, mp, world, output.empty() ? default_output(profiles, model, nodes, world, o, precision)
                                                                : output);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "galvatron_search: %s\n", e.what());
    return 1;
  }
  return 0;
}
