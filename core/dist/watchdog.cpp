// Watchdog thread (see watchdog.h).
#include "core/dist/watchdog.h"

#include <cstdio>

#include "core/dist/runtime.h"

namespace booster::dist {

Watchdog& Watchdog::instance() {
  static Watchdog* w = new Watchdog;  // never destroyed: may be used during exit
  return *w;
}

void Watchdog::start(double timeout_s) {
  std::lock_guard lock(mu_);
  timeout_s_ = timeout_s;
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

void Watchdog::stop() {
  {
    std::lock_guard lock(mu_);
    if (!running_) return;
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Watchdog::enter(const std::string& op, const std::string& group) {
  std::lock_guard lock(mu_);
  const uint64_t t = next_++;
  inflight_[t] = Entry{op, group, std::chrono::steady_clock::now()};
  return t;
}

void Watchdog::leave(uint64_t token) {
  std::lock_guard lock(mu_);
  inflight_.erase(token);
}

void Watchdog::run() {
  std::unique_lock lock(mu_);
  while (running_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    const auto now = std::chrono::steady_clock::now();
    for (auto& [t, e] : inflight_) {
      const double waited = std::chrono::duration<double>(now - e.start).count();
      if (waited > timeout_s_) {
        char msg[512];
        std::snprintf(msg, sizeof msg,
                      "collective watchdog: %s on group '%s' has been waiting %.1f s (timeout %.1f s); another rank "
                      "probably failed or took a different path. Aborting the job.",
                      e.op.c_str(), e.group.c_str(), waited, timeout_s_);
        lock.unlock();
        abort_job(msg, 3);
      }
    }
  }
}

}  // namespace booster::dist
