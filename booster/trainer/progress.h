// The Trainer's progress display: a one-line bar on stderr when it is a terminal, or a log
// line every `log_every` iterations, with the latest step metrics (LogMetricByStepHook's):
// "epoch 1/3 step 12/29 loss 0.4321 lr 1.000e-03 41.2 img/s ETA 9s".
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace booster {

class ProgressBar {
 public:
  /// interactive: draw the bar; otherwise log every log_every-th step and the last (0: never).
  ProgressBar(std::string title, int64_t total, bool interactive, int64_t log_every);
  /// Redraws (or logs) after `step` of total with these values.
  void update(int64_t step, const std::map<std::string, double>& values);
  /// Ends the bar's line.
  void finish();

 private:
  std::string title_;
  int64_t total_, log_every_;
  bool interactive_, open_ = false;
  std::chrono::steady_clock::time_point start_;
};

/// "loss 0.4321 lr 1.000e-03 41.2 img/s" for Loss, LR and Throughput (in that order), then
/// "<name> <value>" for any other.
std::string format_step_metrics(const std::map<std::string, double>& values);

}  // namespace booster
