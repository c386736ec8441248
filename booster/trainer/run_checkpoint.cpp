// Run checkpoints (see run_checkpoint.h).
#include "booster/trainer/run_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/checkpoint/state_io.h"
#include "booster/checkpoint/container.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/common/file_util.h"

namespace booster {

namespace fs = std::filesystem;

namespace {
uint64_t file_checksum(const fs::path& f) {
  const std::string bytes = read_text_file(f.string());
  return ckpt::checksum(bytes.data(), bytes.size());
}

std::vector<fs::path> complete_steps(const std::string& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 && fs::exists(e.path() / "progress.ckpt"))
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string save_run_checkpoint(Booster& booster, const RunState& s, const std::string& dir, bool shard, int keep_last,
                                proto::TrainingProgress progress, bool use_async) {
  booster.checkpoint_io().synchronize();  // the previous run checkpoint is complete first
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", (long long)progress.step());
  const std::string step_dir = (fs::path(dir) / name).string();
  const bool writer = !dist::is_initialized() || dist::world_rank() == 0;
  if (writer) {
    fs::create_directories(step_dir);
    if (s.side_files)
      for (const std::string& f : s.side_files(step_dir))
        (*progress.mutable_file_checksums())[f] = file_checksum(fs::path(step_dir) / f);
  }
  booster.save_model(*s.model, (fs::path(step_dir) / (shard ? "model" : "model.ckpt")).string(), shard, "", 1024,
                     use_async);
  if (s.optimizer)
    booster.save_optimizer(*s.optimizer, (fs::path(step_dir) / (shard ? "optimizer" : "optimizer.ckpt")).string(), shard,
                           "", 1024, use_async);
  if (s.scheduler) booster.save_lr_scheduler(*s.scheduler, (fs::path(step_dir) / "scheduler.ckpt").string());
  // Every rank's generator state, so a resume draws the same numbers.
  const GeneratorState g = default_generator().state();
  Tensor mine = Tensor::from_ints({int64_t(g.seed), int64_t(g.stream), int64_t(g.counter)}, {3});
  const int world = dist::is_initialized() ? dist::world_size() : 1;
  Tensor all = Tensor::empty({world, 3}, DType::i64);
  if (world > 1) dist::all_gather(all, mine);
  else all = mine.view({1, 3});
  auto v = all.to_int_vector();
  for (int r = 0; r < world; ++r) {
    auto* s_ = progress.add_rng();
    s_->set_rank(r);
    s_->set_seed(uint64_t(v[size_t(3 * r)]));
    s_->set_stream(uint64_t(v[size_t(3 * r + 1)]));
    s_->set_counter(uint64_t(v[size_t(3 * r + 2)]));
  }
  // Last, once the model and optimizer are written (behind training, with use_async): the
  // progress marks the folder complete, and only then do older ones go.
  booster.checkpoint_io().after_saves(
      [writer, step_dir, dir, keep_last, progress] {
        if (!writer) return;
        ckpt::write_message_file((fs::path(step_dir) / "progress.ckpt").string(), progress);
        auto steps = complete_steps(dir);
        for (size_t i = 0; i + size_t(std::max(keep_last, 1)) < steps.size(); ++i) fs::remove_all(steps[i]);
      },
      "saving training progress to '" + step_dir + "'");
  return step_dir;
}

void remove_partial_checkpoints(const std::string& dir) {
  if (!fs::is_directory(dir) || fs::exists(fs::path(dir) / "progress.ckpt")) return;
  for (auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0 || fs::exists(e.path() / "progress.ckpt")) continue;
    spdlog::warn("removing '{}': a checkpoint whose save did not finish (it has no progress.ckpt)", e.path().string());
    fs::remove_all(e.path());
  }
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "progress.ckpt")) return dir;
  auto steps = complete_steps(dir);
  if (steps.empty()) return std::nullopt;
  return steps.back().string();
}

proto::TrainingProgress verify_run_checkpoint(const std::string& step_dir) {
  proto::TrainingProgress p = load_progress((fs::path(step_dir) / "progress.ckpt").string());
  for (auto& [name, sum] : p.file_checksums())
    BOOSTER_CHECK_T(IOError, file_checksum(fs::path(step_dir) / name) == sum, "checkpoint: '",
                    (fs::path(step_dir) / name).string(), "' is corrupt: its checksum differs from the one ",
                    "progress.ckpt recorded when it was saved");
  return p;
}

proto::TrainingProgress read_run_progress(const std::string& step_dir) {
  proto::TrainingProgress p;
  ckpt::on_every_rank([&] { p = verify_run_checkpoint(step_dir); }, "resuming from '" + step_dir + "'");
  return p;
}

std::string step_checkpoint_path(const std::string& step_dir, const std::string& part) {
  const fs::path d(step_dir);
  return (fs::is_directory(d / part) ? d / part : d / (part + ".ckpt")).string();
}

void load_run_model(Booster& booster, ModelWrapper& model, const std::string& step_dir) {
  verify_run_checkpoint(step_dir);
  // A LoRA run's checkpoint holds the base and the adapters under PEFT's names: the model
  // takes the adapters of its adapter_config.json, loads, and folds them in.
  const auto lora = nn::saved_lora_config(step_dir);
  if (lora) nn::inject_lora(*model.module(), *lora);
  booster.load_model(model, step_checkpoint_path(step_dir));
  if (lora) nn::merge_and_unload(*model.module());
}

proto::TrainingProgress load_run_checkpoint(Booster& booster, const RunState& s, const std::string& step_dir) {
  const fs::path d(step_dir);
  const proto::TrainingProgress p = read_run_progress(step_dir);
  booster.load_model(*s.model, step_checkpoint_path(step_dir));
  if (s.optimizer) booster.load_optimizer(*s.optimizer, step_checkpoint_path(step_dir, "optimizer"));
  if (s.scheduler) booster.load_lr_scheduler(*s.scheduler, (d / "scheduler.ckpt").string());
  const int world = dist::is_initialized() ? dist::world_size() : 1, me = dist::is_initialized() ? dist::world_rank() : 0;
  if (p.rng_size() == world) {
    const auto& g = p.rng(me);
    default_generator().set_state({g.seed(), g.stream(), g.counter()});
  } else {
    spdlog::warn("resume: checkpoint written by {} ranks, running on {}; generators are re-seeded", p.rng_size(), world);
  }
  return p;
}

}  // namespace booster
