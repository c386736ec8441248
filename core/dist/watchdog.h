// The collective watchdog: every collective in flight is registered with its name and
// group; one that waits longer than the timeout is reported (which collective, which
// group, how long) and the job is aborted, instead of hanging forever.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace booster::dist {

class Watchdog {
 public:
  static Watchdog& instance();
  /// Starts the monitor thread (idempotent; a new timeout replaces the old).
  void start(double timeout_s);
  void stop();
  double timeout() const { return timeout_s_; }
  /// Registers an operation in flight; returns its token.
  uint64_t enter(const std::string& op, const std::string& group);
  /// Marks it finished.
  void leave(uint64_t token);

 private:
  struct Entry {
    std::string op, group;
    std::chrono::steady_clock::time_point start;
  };
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> inflight_;
  uint64_t next_ = 1;
  double timeout_s_ = 0;
  bool running_ = false;
  std::thread thread_;
};

/// Registers an operation with the watchdog for its lifetime.
class WatchdogScope {
 public:
  WatchdogScope(const std::string& op, const std::string& group) : token_(Watchdog::instance().enter(op, group)) {}
  ~WatchdogScope() { Watchdog::instance().leave(token_); }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;

 private:
  uint64_t token_;
};

}  // namespace booster::dist
