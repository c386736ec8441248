// Data layouts and resumes across them (see data_layout.h).
#include "booster/trainer/data_layout.h"

#include <filesystem>

#include "booster/checkpoint/general_checkpoint_io.h"
#include "booster/trainer/run_checkpoint.h"
#include "core/common/check.h"
#include "proto/checkpoint.pb.h"

namespace booster {

std::string DataLayout::describe() const {
  return std::to_string(dp_size) + (dp_size == 1 ? " replica x " : " replicas x ") + std::to_string(batch_size) +
         " rows x " + std::to_string(gradient_accumulation) + " accumulated (global batch " +
         std::to_string(global_batch()) + ")";
}

proto::DataLayout DataLayout::to_proto() const {
  proto::DataLayout p;
  p.set_dp_size(dp_size);
  p.set_batch_size(batch_size);
  p.set_gradient_accumulation(gradient_accumulation);
  p.set_dataset_size(dataset_size);
  p.set_steps_per_epoch(steps_per_epoch);
  return p;
}

DataLayout DataLayout::from_proto(const proto::DataLayout& p) {
  return {p.dp_size(), p.batch_size(), p.gradient_accumulation(), p.dataset_size(), p.steps_per_epoch()};
}

ResumePoint resume_point(const proto::TrainingProgress& p, const DataLayout& now) {
  const ResumePoint as_saved{p.epoch(), p.step(), p.sampler_position(), false};
  if (!p.has_layout()) return as_saved;
  const DataLayout was = DataLayout::from_proto(p.layout());
  const std::string both = "the checkpoint's run had " + was.describe() + ", this one has " + now.describe();
  BOOSTER_CHECK(was.dataset_size == now.dataset_size, "resume: the checkpoint's run drew from ", was.dataset_size,
                " training samples an epoch, this one from ", now.dataset_size,
                ": its data order cannot continue over another dataset (", both, ")");
  if (was.dp_size == now.dp_size && was.batch_size == now.batch_size &&
      was.gradient_accumulation == now.gradient_accumulation)
    return as_saved;
  BOOSTER_CHECK(was.global_batch() == now.global_batch(), "resume: ", both,
                "; the learning-rate schedule and the data order hold only for the same global batch: give each of the ",
                now.dp_size, " replicas batch_size x gradient_accumulation = ", was.global_batch(), " / ", now.dp_size,
                was.global_batch() % now.dp_size == 0 ? "" : " (which does not divide: run on a divisor's replicas)");
  BOOSTER_CHECK(was.steps_per_epoch == now.steps_per_epoch, "resume: ", both, "; an epoch is ", was.steps_per_epoch,
                " optimizer steps there and ", now.steps_per_epoch,
                " here (the per-replica split of its samples drops another tail), so the schedule would change");
  const int64_t rows = now.dp_size * now.batch_size;
  BOOSTER_CHECK(p.epoch_samples() % (rows * now.gradient_accumulation) == 0, "resume: the checkpoint stands ",
                p.epoch_samples(), " samples into its epoch, not at an optimizer step of ", both);
  return {p.epoch(), p.optimizer_steps() * now.gradient_accumulation, p.epoch_samples() / rows, true};
}

BatchPlan batch_keeping(int64_t global, int64_t dp_size, int64_t batch_size) {
  BOOSTER_CHECK(dp_size >= 1 && batch_size >= 1 && global >= 1, "batch_keeping: global batch ", global, ", ", dp_size,
                " replicas, batch ", batch_size);
  BOOSTER_CHECK(global % dp_size == 0, "the global batch ", global, " does not divide over ", dp_size,
                " data-parallel replicas: run on a number of replicas that divides it");
  const int64_t share = global / dp_size;
  int64_t b = std::min(batch_size, share);
  while (share % b != 0) --b;
  return {b, share / b};
}

std::optional<DataLayout> saved_layout(const std::string& resume) {
  const auto step_dir = latest_checkpoint(resume);
  BOOSTER_CHECK_T(IOError, step_dir.has_value(), "resume: no complete checkpoint under '", resume, "'");
  const proto::TrainingProgress p = load_progress((std::filesystem::path(*step_dir) / "progress.ckpt").string());
  if (!p.has_layout()) return std::nullopt;
  return DataLayout::from_proto(p.layout());
}

}  // namespace booster
