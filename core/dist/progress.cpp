// The progress thread (see progress.h).
#include "core/dist/progress.h"

#include <mpi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/collectives.h"

namespace booster::dist {

namespace {

class ProgressEngine {
 public:
  ~ProgressEngine() { stop(); }

  void start(int64_t poll_us) {
    std::lock_guard<std::mutex> l(m_);
    poll_us_ = std::max<int64_t>(1, poll_us);
    if (thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> l(m_);
      if (!thread_.joinable()) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard<std::mutex> l(m_);
    works_.clear();
  }

  bool running() {
    std::lock_guard<std::mutex> l(m_);
    return thread_.joinable() && !stop_;
  }

  void track(Work* w) {
    {
      std::lock_guard<std::mutex> l(m_);
      if (!thread_.joinable() || stop_) return;
      works_.push_back(w);
    }
    cv_.notify_all();
  }

  void untrack(Work* w) {
    std::unique_lock<std::mutex> l(m_);
    works_.erase(std::remove(works_.begin(), works_.end(), w), works_.end());
    idle_.wait(l, [&] { return current_ != w; });  // a test of it in progress returns first
  }

 private:
  // Tests each tracked Work in turn (one at a time, `current_`), drops the settled ones,
  // sleeps the poll interval, and sleeps until work arrives when there is none.
  void run() {
    std::unique_lock<std::mutex> l(m_);
    while (!stop_) {
      if (works_.empty()) {
        cv_.wait(l, [&] { return stop_ || !works_.empty(); });
        continue;
      }
      for (size_t i = 0; i < works_.size() && !stop_;) {
        Work* w = works_[i];
        current_ = w;
        l.unlock();
        const bool settled = w->progress_in_background();
        l.lock();
        current_ = nullptr;
        idle_.notify_all();
        auto it = std::find(works_.begin(), works_.end(), w);  // untrack may have removed it
        if (it == works_.end()) continue;
        if (settled) works_.erase(it);
        else i = size_t(it - works_.begin()) + 1;
      }
      cv_.wait_for(l, std::chrono::microseconds(poll_us_), [&] { return stop_; });
    }
  }

  std::mutex m_;
  std::condition_variable cv_, idle_;
  std::thread thread_;
  std::vector<Work*> works_;
  Work* current_ = nullptr;
  int64_t poll_us_ = 50;
  bool stop_ = false;
};

ProgressEngine& engine() {
  static ProgressEngine e;
  return e;
}

std::atomic<bool> g_env_checked{false};

void check_env() {
  if (g_env_checked.exchange(true)) return;
  const char* on = std::getenv("BOOSTER_COMM_THREAD");
  if (!on || std::string(on) == "0" || std::string(on).empty()) return;
  const char* poll = std::getenv("BOOSTER_COMM_POLL_US");
  set_progress_thread(true, poll ? std::atoll(poll) : 50);
}

}  // namespace

void set_progress_thread(bool on, int64_t poll_us) {
  g_env_checked = true;
  if (!on) return engine().stop();
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    spdlog::warn("progress thread: MPI gives thread level {} here, not MPI_THREAD_MULTIPLE: left off", provided);
    return;
  }
  engine().start(poll_us);
}

bool progress_thread_enabled() {
  check_env();
  return engine().running();
}

namespace detail {
void progress_track(Work* w) {
  if (progress_thread_enabled()) engine().track(w);
}
void progress_untrack(Work* w) { engine().untrack(w); }
}  // namespace detail

}  // namespace booster::dist
