// MultiTimer (legacy Colossal-AI's trainer timer): named wall-clock timers, each keeping
// every measured interval, so a hook can read the last one, the mean, or the mean past a
// warm-up. The Trainer times "Train-epoch", "Train-step", "Test-epoch" and "Test-step".
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace booster {

class MultiTimer {
 public:
  /// Starts (or restarts) timer `name`.
  void start(const std::string& name);
  /// Stops `name` and records the interval since its start; returns it in seconds.
  double stop(const std::string& name);
  bool has(const std::string& name) const { return history_.count(name) > 0; }
  /// The last recorded interval (0 when none).
  double last(const std::string& name) const;
  /// The mean of the recorded intervals after the first `skip` of them (0 when none).
  double mean(const std::string& name, size_t skip = 0) const;
  /// The sum of the recorded intervals.
  double total(const std::string& name) const;
  size_t count(const std::string& name) const;
  /// Forgets `name`'s intervals.
  void reset(const std::string& name);
  /// The names of the timers, sorted.
  std::vector<std::string> names() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::map<std::string, Clock::time_point> started_;
  std::map<std::string, std::vector<double>> history_;
};

}  // namespace booster
