// booster_estimate: each rank's peak memory for a run config, by part (parameters,
// gradients, fp32 masters, optimizer states, activations, buffers, communication), and
// where in the step it falls, from the cost model Galvatron's search uses
// (galvatron/cost_model.h) and the profiles of one layer its profilers write
// (galvatron_profile_hardware, galvatron_profile_model). Nothing is trained: the model is
// built lazily (no tensors) to learn its layers, units and chunks. The config is vit_train's
// or lm_train's (--program; lm_train's when it sets train.block_size), read with the same
// schema, so a wrong key is refused as there.
//   booster_estimate --config examples/vit/configs/gemini.toml --world 2 --profiles profiles/
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "core/common/check.h"
#include "galvatron/cost_model.h"
#include "nn/pipeline.h"
#include "nn/vit.h"
#include "plugins/memory_plan.h"
#include "lm_setup.h"
#include "nn/lazy.h"
#include "run_setup.h"
#include "train_config.h"

using namespace booster;
namespace gv = booster::galvatron;

namespace {

struct EstimatedRun {
  std::shared_ptr<nn::Module> model;
  std::string profile_name;  // the model profile's name (the preset)
  int64_t batch = 0, seq = 0;  // seq: tokens a sample (a ViT's patches and its class token)
  double checkpoint_ratio = 0;
};

// What both programs' configs say alike (their [model] and [train] keys share these names).
EstimatedRun run_keys(const Config& cfg) {
  BOOSTER_CHECK(cfg.get_string("model.pretrained").empty(), cfg.where("model.pretrained"), ": the estimate needs the "
                "model's preset (model.preset), whose profile names it");
  EstimatedRun r;
  r.profile_name = cfg.get_string("model.preset");
  r.batch = cfg.get_int("train.batch_size");
  r.checkpoint_ratio = cfg.get_bool("model.gradient_checkpointing") ? cfg.get_float("model.gradient_checkpointing_ratio") : 0;
  return r;
}

// vit_train's config, as vit_train reads it, and its model (lazy).
EstimatedRun vit_run(Config& cfg) {
  const bool legacy_parallel = cfg.has("parallel");
  cfg.apply(examples::vit_train_schema());
  examples::map_legacy_model(cfg, legacy_parallel);
  if (legacy_parallel) examples::map_legacy_parallel(cfg);
  cfg.set("model.lazy_init=true");
  EstimatedRun r = run_keys(cfg);
  const int64_t labels = cfg.get_string("data.dataset") == "fashion_mnist" ? 10 : 3;  // the classifier: tiny either way
  auto vit = examples::make_model(cfg, std::vector<std::string>(size_t(labels), "class"));
  r.seq = vit->config().num_patches() + 1;
  r.model = vit;
  return r;
}

// lm_train's config, as lm_train reads it (its text tokenized into data.cache_dir for the
// vocabulary), and its model (lazy).
EstimatedRun lm_run(Config& cfg) {
  cfg.apply(examples::lm_train_schema());
  EstimatedRun r = run_keys(cfg);
  nn::LazyInit lazy;
  r.model = examples::lm_run_model(cfg).module;
  r.seq = cfg.get_int("train.block_size");
  return r;
}

// The profile must be of this model: one layer's parameters and the sequence.
void check_profile(const gv::ModelProfile& mp, const EstimatedRun& run, const std::string& profiles) {
  const nn::Module& model = *run.model;
  const std::string& name = run.profile_name;
  BOOSTER_CHECK(mp.seq == run.seq, "the model profile of ", name, " in ", profiles, " was made at ", mp.seq,
                " tokens a sample, the config's model has ", run.seq, " (its model.image_size or train.block_size): "
                "profile it at this size with galvatron_profile_model");
  const double layer = double(nn::stage_parameter_count(model, {0, 1, false, false}));
  BOOSTER_CHECK(layer == mp.param_count, "the model profile of ", name, " in ", profiles, " has ", (long long)mp.param_count,
                " parameters a layer, the config's model ", (long long)layer, ": profile this model with galvatron_profile_model");
  const double layers = double(dynamic_cast<const nn::PipelineModule&>(model).num_pipeline_layers());
  const double other = double(nn::parameter_count(model)) - layer * layers;  // the embeddings and head: the vocabulary's
  BOOSTER_CHECK(std::abs(other - mp.other_param_count) <= 0.02 * std::max(other, mp.other_param_count), "the model "
                "profile of ", name, " in ", profiles, " has ", (long long)mp.other_param_count, " parameters beside its "
                "layers, the config's model ", (long long)other, " (another vocabulary or head): profile this model "
                "with galvatron_profile_model");
}

void print_parts(const gv::MemoryParts& parts) {
  for (const auto& [name, mb] : parts.named()) std::printf("    %-18s %10.1f MB\n", name, mb);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Each rank's peak memory for a run config, by part, from Galvatron's cost model"};
  std::string config_path, profiles = "galvatron_profiles", program = "vit_train";
  std::vector<std::string> overrides;
  int world = 0, nodes = 1;
  bool json = false;
  app.add_option("--config", config_path, "the run config (TOML)")->required();
  app.add_option("--set", overrides, "override a config key: --set plugin.zero_stage=2");
  app.add_option("--world", world, "ranks")->required();
  app.add_option("--nodes", nodes, "nodes (the hardware profile's file names)");
  app.add_option("--profiles", profiles, "folder of the profile files (galvatron_profile_hardware, galvatron_profile_model)");
  app.add_option("--program", program, "whose config it is (default: lm_train when it has train.block_size)")
      ->check(CLI::IsMember({"vit_train", "lm_train"}));
  app.add_flag("--json", json, "one JSON line: the largest stage's peak and its parts");
  CLI11_PARSE(app, argc, argv);
  try {
    Config cfg = Config::from_file(config_path, overrides);
    if (!app.count("--program") && cfg.has("train.block_size")) program = "lm_train";
    EstimatedRun run = program == "lm_train" ? lm_run(cfg) : vit_run(cfg);
    const plugins::MemoryPlan mp = plugins::memory_plan(cfg, "plugin", *run.model, world, run.batch, run.checkpoint_ratio,
                                                        cfg.get_string("booster.mixed_precision"));
    const auto hw = gv::HardwareProfile::read(profiles, nodes, world / nodes);
    const auto model_profile = gv::ModelProfile::read(profiles, mp.precision, run.profile_name);
    check_profile(model_profile, run, profiles);
    BOOSTER_CHECK(model_profile.sequence_parallel == mp.megatron_sp, "the model profile of ", run.profile_name, " in ",
                  profiles, mp.megatron_sp ? " was made without" : " was made with", " Megatron's sequence parallelism, "
                  "which the run ", mp.megatron_sp ? "has" : "has not", ": profile it again ",
                  mp.megatron_sp ? "with" : "without", " galvatron_profile_model --sequence-parallel");
    gv::CostModel cm(hw, model_profile, world, mp.precision);
    cm.set_zero3_unit(mp.zero3_unit_params);
    cm.set_ddp_buckets(mp.ddp_buckets);
    cm.set_zero1(mp.zero1);
    const gv::PlanCost cost = cm.cost(mp.plan);
    const gv::StageCost* top = &cost.stages.front();
    for (const auto& st : cost.stages) if (st.memory_mb > top->memory_mb) top = &st;
    // cpu_offload: the masters and optimizer states live on the disk tier, not in RAM.
    const auto in_ram = [&](gv::MemoryParts p) {
      if (mp.offload_states) p.masters = p.optimizer = 0;
      return p;
    };
    const gv::MemoryParts ram = in_ram(top->parts);
    const double disk = top->parts.total() - ram.total();
    if (json) {
      std::string parts;
      for (const auto& [name, mb] : ram.named()) parts += ", \"" + std::string(name) + "\": " + std::to_string(mb);
      std::printf("{\"config\": \"%s\", \"world\": %d, \"precision\": \"%s\", \"global_batch\": %lld, \"batch_per_replica\": %lld, \"seq\": %lld, "
                  "\"estimated_mb\": %.1f, \"disk_mb\": %.1f, \"peak_at\": \"%s\", \"parts_mb\": {%s}}\n",
                  config_path.c_str(), world, mp.precision.c_str(), (long long)mp.plan.global_bsz, (long long)(mp.plan.global_bsz / mp.dp), (long long)run.seq, ram.total(), disk,
                  top->peak_at, parts.substr(2).c_str());
      return 0;
    }
    std::printf("%s\n%s, %s, global batch %lld on %d ranks; layers: %s\n", config_path.c_str(), mp.what.c_str(),
                mp.precision.c_str(), (long long)mp.plan.global_bsz, world, mp.plan.summary(world).c_str());
    for (size_t k = 0; k < cost.stages.size(); ++k) {
      const auto& st = cost.stages[k];
      const gv::MemoryParts p = in_ram(st.parts);
      std::printf("%s: peak %.1f MB a rank, in the %s\n", cost.stages.size() > 1 ? ("stage " + std::to_string(k)).c_str()
                                                                               : "every rank",
                  p.total(), st.peak_at);
      print_parts(p);
    }
    if (mp.offload_states) std::printf("on the disk tier (cpu_offload): %.1f MB a rank of masters and optimizer states\n", disk);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "booster_estimate: %s\n", e.what());
    return 1;
  }
  return 0;
}
