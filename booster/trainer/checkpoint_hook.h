// SaveCheckpointHook (legacy Colossal-AI's, with v0.1's LoadCheckpointHook folded in as
// `resume`): whole run checkpoints (model, optimizer, scheduler, progress, the generators,
// the Trainer's records, the run's side files) in step folders under checkpoint_dir, every
// interval epochs or iterations and once at the end, and a resume from the newest complete
// one before training. Unlike the legacy hook: every save is a new folder (the HEAD hook
// overwrote one path with only the epoch and the model), nothing is saved before the first
// step, and a save inside a gradient-accumulation window waits for its optimizer step.
#pragma once

#include "booster/trainer/run_checkpoint.h"
#include "booster/trainer/trainer.h"

namespace booster {

struct SaveCheckpointOptions {
  int64_t interval = 1;  // every interval epochs (iterations with save_by_iter); <= 0: no periodic saves
  std::string checkpoint_dir{};
  bool save_by_iter = false;
  int priority = 10;
  std::shared_ptr<optim::LRScheduler> lr_scheduler{};  // saved and resumed with the model (legacy: LRSchedulerHook's)
  bool shard = false;                                // sharded model and optimizer folders
  int keep_last = 1 << 30;                           // older complete checkpoints beyond this are removed
  bool save_final = true;                            // a checkpoint when fit() ends (the periodic one at that step skipped)
  std::string resume{};                              // a step folder, or the folder holding them, to resume from
  SideFiles side_files{};                            // the run's own files in every step folder
  bool use_async = false;                            // written behind training (Booster's use_async); fit() waits at its end
};

class SaveCheckpointHook : public BaseHook {
 public:
  explicit SaveCheckpointHook(SaveCheckpointOptions options);
  /// With `resume`: loads the newest complete checkpoint there (partial ones are removed,
  /// with a warning) and sets the Trainer's progress and records.
  void before_train(Trainer& t) override;
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void after_train_epoch(Trainer& t) override;
  void after_train(Trainer& t) override;
  /// The folder of the latest save ("" before any).
  const std::string& last_saved() const { return last_saved_; }

 private:
  void save(Trainer& t);
  SaveCheckpointOptions o_;
  std::string last_saved_;
  int64_t saved_step_ = -1;
};

}  // namespace booster
