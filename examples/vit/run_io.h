// What a run leaves behind: JSON lines of metrics, the same scalars as TensorBoard events,
// and a PNG of the curves drawn by gnuplot, written by RunRecordHook from the Trainer's
// metrics (the progress bar is the Trainer's).
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "booster/summary_writer.h"
#include "booster/trainer/trainer.h"

namespace booster::examples {

/// Appends JSON lines to <dir>/metrics.jsonl, writes their scalars as TensorBoard events in
/// <dir> (step records: train/loss, train/lr, train/images_per_s; epoch records:
/// train/epoch_loss, val/loss, val/accuracy, at their "step") and keeps the per-epoch curves
/// for plots.
/// Only the writing rank opens the file (another rank's truncating open would punch a hole
/// of NUL bytes into what the writer already wrote); on the others every call is a no-op.
class MetricsLog {
 public:
  MetricsLog(const std::string& dir, bool append, bool writer);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& line);
  /// Records an epoch and redraws <dir>/curves.png with gnuplot (a warning when absent).
  void epoch(int64_t epoch, double train_loss, double val_loss, double val_accuracy);

 private:
  void plot();
  std::string dir_;
  std::FILE* f_ = nullptr;
  std::unique_ptr<SummaryWriter> tb_;
  struct Point {
    int64_t epoch;
    double train_loss, val_loss, val_acc;
  };
  std::vector<Point> points_;
  bool warned_ = false;
};

/// vit_train's record of a run, as a Trainer hook: every log_every-th step a "step" line
/// (loss, lr, images/s); after each test the epoch's log line, its "epoch" line and the
/// curves, and the best accuracy in the Trainer's records (checkpoints keep it). With
/// kill_after_steps (testing the resume path) it SIGKILLs the process, without cleanup,
/// after that step: priority 20, after that step's checkpoint (SaveCheckpointHook's 10).
class RunRecordHook : public BaseHook {
 public:
  RunRecordHook(std::shared_ptr<MetricsLog> metrics, int64_t log_every, int64_t kill_after_steps = 0, int priority = 20)
      : BaseHook(priority), metrics_(std::move(metrics)), log_every_(log_every), kill_after_(kill_after_steps) {}
  void after_train_iter(Trainer& t, const IterationOutput& out) override;
  void after_test_epoch(Trainer& t) override;

 private:
  std::shared_ptr<MetricsLog> metrics_;
  int64_t log_every_, kill_after_;
};

}  // namespace booster::examples
