// A run's checkpoints: <dir>/step-<N>/ holds the model and optimizer (through the
// Booster), the scheduler, the Hugging Face config and processor, and the training
// progress (written last: its presence marks a complete checkpoint). Older ones beyond
// keep_last are removed.
#pragma once

#include <optional>
#include <string>

#include "booster/booster.h"
#include "data/image_processor.h"
#include "nn/vit.h"
#include "proto/checkpoint.pb.h"

namespace booster::examples {

struct RunState {
  ModelWrapper* model;
  OptimizerWrapper* optimizer;
  optim::LRScheduler* scheduler;
  const nn::ViTConfig* config;
  const data::ViTImageProcessor* processor;
};

/// Saves step `progress.step()` under dir and prunes to keep_last; returns its folder.
std::string save_run_checkpoint(Booster& booster, const RunState& s, const std::string& dir, bool shard, int keep_last,
                                proto::TrainingProgress progress);
/// Removes, with a warning each, the step folders under dir whose save did not finish.
void remove_partial_checkpoints(const std::string& dir);
/// The newest complete step folder under dir (or dir itself when it is one).
std::optional<std::string> latest_checkpoint(const std::string& dir);
/// The step folder's progress, after checking the files it lists (config.json and the
/// processor's) against their checksums: an IOError naming a file that changed.
proto::TrainingProgress verify_run_checkpoint(const std::string& step_dir);
/// Loads model, optimizer and scheduler from a step folder and returns its progress; each
/// rank's generator state is restored when the world size matches.
proto::TrainingProgress load_run_checkpoint(Booster& booster, const RunState& s, const std::string& step_dir);

/// Testing the resume path (train.kill_after_steps): SIGKILLs this process, without any
/// cleanup, once `step` reaches kill_after (> 0).
void kill_for_testing(int64_t step, int64_t kill_after);

}  // namespace booster::examples
