// A run's checkpoints: <dir>/step-<N>/ holds the model and optimizer (through the
// Booster), the scheduler, the run's own files (a model config, an image processor: what
// RunState::side_files writes) and the training progress (written last: its presence marks
// a complete checkpoint; it keeps the side files' checksums). Older ones beyond keep_last
// are removed. SaveCheckpointHook saves and resumes through these.
#pragma once

#include <optional>
#include <string>

#include <functional>
#include <vector>

#include "booster/booster.h"
#include "proto/checkpoint.pb.h"

namespace booster {

/// Writes the run's own files into a step folder (called on rank 0 only) and returns their
/// names in it: progress.ckpt records their checksums.
using SideFiles = std::function<std::vector<std::string>(const std::string& step_dir)>;

/// What a run checkpoint holds; a null optimizer or scheduler is neither saved nor loaded.
struct RunState {
  ModelWrapper* model = nullptr;
  OptimizerWrapper* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  SideFiles side_files;
};

/// Saves step `progress.step()` under dir and prunes to keep_last (>= 1); returns its folder.
/// use_async: the model and optimizer are written behind training (Booster's use_async), the
/// progress after them; the folder is complete once booster.checkpoint_io().synchronize()
/// returns (the next save waits for it too).
std::string save_run_checkpoint(Booster& booster, const RunState& s, const std::string& dir, bool shard, int keep_last,
                                proto::TrainingProgress progress, bool use_async = false);
/// Removes, with a warning each, the step folders under dir whose save did not finish.
void remove_partial_checkpoints(const std::string& dir);
/// The newest complete step folder under dir (or dir itself when it is one).
std::optional<std::string> latest_checkpoint(const std::string& dir);
/// The step folder's progress, after checking the side files it lists against their checksums: an IOError naming a file that changed.
proto::TrainingProgress verify_run_checkpoint(const std::string& step_dir);
/// verify_run_checkpoint on every rank: an error on one is every rank's.
proto::TrainingProgress read_run_progress(const std::string& step_dir);
/// A step folder's checkpoint of `part` ("model", "optimizer"): its shard folder where the
/// run saved shards, else the single file part.ckpt.
std::string step_checkpoint_path(const std::string& step_dir, const std::string& part = "model");
/// Checks the step folder's side files and loads only its model (prediction, evaluation).
/// (A LoRA run's step folder, with its adapter_config.json: the model gets the adapters,
/// loads, and has them merged in; `booster` must be plugin-less then.)
void load_run_model(Booster& booster, ModelWrapper& model, const std::string& step_dir);
/// Loads model, optimizer and scheduler from a step folder and returns its progress; each
/// rank's generator state is restored when the world size matches.
proto::TrainingProgress load_run_checkpoint(Booster& booster, const RunState& s, const std::string& step_dir);

}  // namespace booster
