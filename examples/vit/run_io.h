// What a run shows and leaves behind: a rank-0 progress bar (plain log lines when output
// is not a terminal), JSON lines of metrics, the same scalars as TensorBoard events, and a
// PNG of the curves drawn by gnuplot.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <memory>
#include <nlohmann/json.hpp>

#include "booster/summary_writer.h"

namespace booster::examples {

/// A one-line progress bar on stderr, or periodic log lines.
class ProgressBar {
 public:
  ProgressBar(std::string title, int64_t total, bool interactive, int64_t log_every);
  /// Redraws (or logs) after `step` of total with the latest figures.
  void update(int64_t step, double loss, double lr, double images_per_s);
  void finish();

 private:
  std::string title_;
  int64_t total_, log_every_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
};

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

}  // namespace booster::examples
