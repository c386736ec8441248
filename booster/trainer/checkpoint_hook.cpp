// SaveCheckpointHook (see checkpoint_hook.h).
#include "booster/trainer/checkpoint_hook.h"

#include "core/dist/logger.h"
#include "core/dist/runtime.h"

namespace booster {

SaveCheckpointHook::SaveCheckpointHook(SaveCheckpointOptions options) : BaseHook(options.priority), o_(std::move(options)) {
  BOOSTER_CHECK(!o_.checkpoint_dir.empty(), "SaveCheckpointHook: checkpoint_dir is required");
  BOOSTER_CHECK(o_.keep_last >= 1, "SaveCheckpointHook: keep_last must be >= 1, got ", o_.keep_last);
}

void SaveCheckpointHook::before_train(Trainer& t) {
  if (o_.resume.empty()) return;
  auto step_dir = latest_checkpoint(o_.resume);
  BOOSTER_CHECK_T(IOError, step_dir.has_value(), "resume: no complete checkpoint under '", o_.resume, "'");
  if (!dist::is_initialized() || dist::world_rank() == 0) remove_partial_checkpoints(o_.resume);
  // Where it continues, before any state loads: a layout it cannot continue on is refused first.
  const ResumePoint at = resume_point(read_run_progress(*step_dir), t.data_layout());
  RunState s{&t.model(), t.optimizer(), o_.lr_scheduler.get(), nullptr};
  const proto::TrainingProgress p = load_run_checkpoint(t.booster(), s, *step_dir);
  t.set_progress(at.epoch, at.step, at.position);
  for (auto& [k, v] : p.metrics()) t.records()[k] = v;
  saved_step_ = at.step;
  dist::logger().info("resumed from {} at epoch {}, step {}", *step_dir, at.epoch, at.step);
  if (at.relaid)
    dist::logger().info("resume: the checkpoint's run had {}, this one has {}: {} optimizer steps and {} samples of "
                        "epoch {} consumed, continued", DataLayout::from_proto(p.layout()).describe(),
                        t.data_layout().describe(), p.optimizer_steps(), p.epoch_samples(), at.epoch + 1);
}

void SaveCheckpointHook::save(Trainer& t) {
  proto::TrainingProgress p;
  p.set_epoch(t.cur_epoch());
  p.set_step(t.cur_step());
  p.set_sampler_position(t.position());
  *p.mutable_layout() = t.data_layout().to_proto();
  p.set_optimizer_steps(t.optimizer_steps());
  p.set_epoch_samples(t.epoch_samples());
  for (auto& [k, v] : t.records()) (*p.mutable_metrics())[k] = v;
  RunState s{&t.model(), t.optimizer(), o_.lr_scheduler.get(), o_.side_files};
  last_saved_ = save_run_checkpoint(t.booster(), s, o_.checkpoint_dir, o_.shard, o_.keep_last, p, o_.use_async);
  saved_step_ = t.cur_step();
  if (o_.use_async) dist::logger().info("checkpoint staged, written behind training: {}", last_saved_);
  else dist::logger().info("checkpoint saved: {}", last_saved_);
}

void SaveCheckpointHook::after_train_iter(Trainer& t, const IterationOutput&) {
  if (!o_.save_by_iter || o_.interval <= 0 || !t.stepped() || t.cur_step() % o_.interval != 0) return;
  if (o_.save_final && t.cur_step() == t.total_steps()) return;  // after_train saves it, after the last test
  save(t);
}

void SaveCheckpointHook::after_train_epoch(Trainer& t) {
  if (o_.save_by_iter || o_.interval <= 0 || t.position() < t.steps_per_epoch()) return;
  if ((t.cur_epoch() + 1) % o_.interval != 0 || (o_.save_final && t.cur_step() == t.total_steps())) return;
  save(t);
}

void SaveCheckpointHook::after_train(Trainer& t) {
  if (o_.save_final && saved_step_ != t.cur_step()) save(t);
  t.booster().checkpoint_io().synchronize();  // fit() ends with its checkpoints written (or their error)
}

}  // namespace booster
