// A per-op wall-time profiler: ops open a scope, the autograd engine times each backward
// node. Off by default (one branch per op); on with Profiler::enable() or BOOSTER_PROFILE=1.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace booster {

/// Accumulated time of one op name.
struct ProfileEntry {
  std::string name;
  double seconds = 0;
  int64_t calls = 0;
};

class Profiler {
 public:
  static bool enabled() { return enabled_; }
  static void enable(bool on = true);
  /// Adds `seconds` to `name` (thread-safe).
  static void add(const char* name, double seconds);
  /// Entries sorted by total time, largest first.
  static std::vector<ProfileEntry> entries();
  static void reset();
  /// A table of entries with share of the total: the profiler's own, or given ones.
  static std::string report();
  static std::string report(const std::vector<ProfileEntry>& entries);

 private:
  static bool enabled_;
};

/// Weighs what this thread adds to the profiler while alive: each of n threads running its
/// own share of one sequence of ops at once (nn::split_batch) adds 1/n of its times, so
/// that the ops add up to the wall time they took together.
class ProfileShareGuard {
 public:
  explicit ProfileShareGuard(double weight);
  ~ProfileShareGuard();
  ProfileShareGuard(const ProfileShareGuard&) = delete;
  ProfileShareGuard& operator=(const ProfileShareGuard&) = delete;

 private:
  double prev_;
};

/// Times its lifetime under `name` when the profiler is on.
class ProfileScope {
 public:
  explicit ProfileScope(const char* name) : name_(Profiler::enabled() ? name : nullptr) {
    if (name_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (name_) Profiler::add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace booster
